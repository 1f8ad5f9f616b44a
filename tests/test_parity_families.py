"""Gemma 2/3, OLMo 1/2, Granite, StableLM (specs/{gemma2,gemma3,olmo,olmo2,granite,stablelm}.yaml) vs transformers.

Each family is a tiny random checkpoint (``save_pretrained``, safetensors) whose configuration makes every piece of its
vocabulary act on the logits: GQA, >= 3 layers, sliding windows (Gemma 2: 6 tokens on a 24-token prompt) on the
layers ``layer_types`` names, soft-caps small enough to bind (attention 2.0, final 3.0), multipliers far from 1
(Granite), norm weights and biases drawn away from their initial ones (zero-centred, float32-weight and LayerNorm
variants all differ there), both StableLM residual layouts. Gates as for the other parity tests: fp32 prefill logits
within 1e-4 and 16 greedy tokens equal to HF's; three-way bf16 (HF fp32 gold, HF bf16 floor, modelgen bf16 within 2x
the floor's error + 1e-3). ``test_each_feature_moves_the_logits`` shows the fixtures are sensitive: switching one
feature off in modelgen's model moves its logits far beyond the tolerance.
"""
from __future__ import annotations

import copy

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.testing import assert_close_three_way
from tests.test_parity_llama import THREE_WAY_ATOL, THREE_WAY_FACTOR, hf_greedy, hf_logits

TARGETS = ["rocm", "neuron"]
PREFILL_ATOL = 1e-4
PROMPT = [int(t) for t in torch.randint(3, 160, (24,), generator=torch.Generator().manual_seed(11))]

_SIZES = dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
              initializer_range=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0)

# name -> (transformers config class, model class, config overrides)
CASES = {
    # layers 0, 2 slide (window 6, shorter than the prompt); 1, 3 full; caps small enough to bind on these logits.
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        num_hidden_layers=4, head_dim=16, query_pre_attn_scalar=24, sliding_window=6, attn_logit_softcapping=2.0,
        final_logit_softcapping=3.0, max_position_embeddings=256)),
    "gemma2_schedule": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=16, sliding_window=4, attn_logit_softcapping=1.5,
        final_logit_softcapping=None, tie_word_embeddings=False, attention_bias=True,
        layer_types=["full_attention", "sliding_attention", "sliding_attention"], max_position_embeddings=256)),
    # RoPE per layer type: sliding layers base 10, full layers base 1000 with linear x2 scaling (both bind on 24
    # tokens); per-head zero-centred q/k norms; the schedule is not Gemma 3's default 5:1.
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        num_hidden_layers=4, head_dim=16, query_pre_attn_scalar=16, sliding_window=5, max_position_embeddings=256,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10.0),
                         "full_attention": dict(rope_type="linear", factor=2.0, rope_theta=1000.0)})),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(num_hidden_layers=3, max_position_embeddings=256)),
    # MQA: under TP=2 the one KV head (and its k_norm slice) is replicated on both ranks.
    "olmo2_mqa": ("Olmo2Config", "Olmo2ForCausalLM", dict(num_hidden_layers=3, num_key_value_heads=1,
                                                          max_position_embeddings=256)),
    # clip_qkv 0.3 binds on many projection outputs (their scale is ~1 here); the norms have no weights.
    "olmo": ("OlmoConfig", "OlmoForCausalLM", dict(num_hidden_layers=3, clip_qkv=0.3, max_position_embeddings=256)),
    "granite": ("GraniteConfig", "GraniteForCausalLM", dict(
        num_hidden_layers=3, embedding_multiplier=6.0, residual_multiplier=0.3, attention_multiplier=0.05,
        logits_scaling=4.0, max_position_embeddings=256)),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", dict(
        num_hidden_layers=3, use_qkv_bias=True, max_position_embeddings=256,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25))),
    "stablelm_parallel": ("StableLmConfig", "StableLmForCausalLM", dict(
        num_hidden_layers=3, use_parallel_residual=True, qk_layernorm=True, max_position_embeddings=256,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5))),
}


def make_checkpoint(path, name: str, seed: int = 0):
    """Save a tiny random model of ``CASES[name]`` and return it (fp32, eager attention: Gemma 2's soft-cap)."""
    import transformers

    config_cls, model_cls, overrides = CASES[name]
    torch.manual_seed(seed)
    config = getattr(transformers, config_cls)(**{**_SIZES, **overrides})
    config._attn_implementation = "eager"
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():
        for n, t in model.named_parameters():
            if "norm" in n and n.endswith("weight"):
                # Off their initial ones/zeros, so (1 + w) vs w, and where the weight meets float32, both matter.
                t.copy_(torch.randn_like(t) * 0.3 + (0.0 if name.startswith("gemma") else 1.0))
            elif n.endswith("bias"):
                t.normal_(0, 0.1)
    model.save_pretrained(path)
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            d = tmp_path_factory.mktemp(name)
            cache[name] = (d, make_checkpoint(d, name))
        return cache[name]

    return get


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_hf_fp32(checkpoint, name, target):
    path, hf = checkpoint(name)
    llm = LLM(path, target=target, dtype="float32", max_model_len=128)
    err = (llm.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < PREFILL_ATOL, f"{name}/{target}: prefill logits differ by {err}"
    out = llm.generate([PROMPT], SamplingParams(max_new_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy(hf, PROMPT, 16), f"{name}/{target}: greedy tokens differ"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["gemma2", "gemma3", "olmo", "olmo2", "granite", "stablelm", "stablelm_parallel"])
def test_against_hf_bf16_three_way(checkpoint, name, target):
    path, hf = checkpoint(name)
    gold = hf_logits(hf, PROMPT)
    floor = hf_logits(copy.deepcopy(hf).to(torch.bfloat16), PROMPT)
    ours = LLM(path, target=target, dtype="bfloat16", max_model_len=128).score(PROMPT).float()
    assert_close_three_way(gold, floor, ours, factor=THREE_WAY_FACTOR, atol=THREE_WAY_ATOL, name=f"{name}/{target}")


def _err_after(path, ref, edit, target: str = "rocm") -> float:
    """modelgen's fp32 prefill logits after ``edit(model)``, against ``ref``: max abs difference."""
    llm = LLM(path, target=target, dtype="float32", max_model_len=128)
    with torch.no_grad():
        edit(llm.model)
    return (llm.score(PROMPT).float() - ref).abs().max().item()


def _layers(model):
    return model.model.layers


@pytest.mark.parametrize("target", TARGETS)
def test_each_feature_moves_the_logits(checkpoint, target):
    """Parity means the features are implemented: each, switched off in modelgen's model, moves the logits far past
    PREFILL_ATOL on these fixtures (so none of them is a no-op there)."""
    def no_window(m):
        for layer in _layers(m):
            if target == "rocm":
                layer.self_attn.attn.sliding_window = None
            elif hasattr(layer.self_attn, "sliding_window"):
                layer.self_attn.sliding_window = None

    def no_attn_softcap(m):
        for layer in _layers(m):
            if target == "rocm":
                layer.self_attn.attn.softcap = None
            else:
                layer.self_attn.softcap = None

    def plain_rms(m):  # (1 + w) -> w
        for layer in _layers(m):
            layer.input_layernorm.zero_centred = False

    path, hf = checkpoint("gemma2")
    ref = hf_logits(hf, PROMPT)
    assert _err_after(path, ref, lambda m: None, target) < PREFILL_ATOL
    assert _err_after(path, ref, no_window, target) > 1e-2
    assert _err_after(path, ref, no_attn_softcap, target) > 1e-2
    assert _err_after(path, ref, lambda m: setattr(m, "logits_softcap", None), target) > 1e-2
    assert _err_after(path, ref, lambda m: setattr(m.model, "embedding_multiplier", 1.0), target) > 1e-2
    assert _err_after(path, ref, plain_rms, target) > 1e-2

    path, hf = checkpoint("granite")
    ref = hf_logits(hf, PROMPT)
    assert _err_after(path, ref, lambda m: setattr(m.model, "embedding_multiplier", 1.0), target) > 1e-2
    assert _err_after(path, ref, lambda m: setattr(m, "logits_divisor", 1.0), target) > 1e-2
    assert _err_after(path, ref, lambda m: [setattr(layer, "residual_multiplier", 1.0)
                                            for layer in _layers(m)], target) > 1e-2

    path, hf = checkpoint("olmo")
    ref = hf_logits(hf, PROMPT)
    assert _err_after(path, ref, lambda m: [setattr(layer.self_attn, "clip_qkv", None)
                                            for layer in _layers(m)], target) > 1e-2

    path, hf = checkpoint("olmo2")
    ref = hf_logits(hf, PROMPT)
    assert _err_after(path, ref, lambda m: [layer.self_attn.q_norm.weight.fill_(1.0)
                                            for layer in _layers(m)], target) > 1e-2


def test_explicit_null_config_values_stay_null(checkpoint):
    """``final_logit_softcapping: null`` in config.json means no cap (HF), not the spec's default of 30."""
    path, _ = checkpoint("gemma2_schedule")
    llm = LLM(path, target="rocm", dtype="float32", max_model_len=64)
    assert llm.model.config.final_logit_softcapping is None and llm.model.logits_softcap is None
    path, _ = checkpoint("gemma2")
    assert LLM(path, target="rocm", dtype="float32", max_model_len=64).model.logits_softcap == 3.0


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, cls", [("stablelm_parallel", "StableLmAttention")])
def test_per_head_weight_qk_norms_refuse_tensor_parallelism(checkpoint, monkeypatch, target, name, cls):
    """StableLM's per-head norms are one module per checkpoint head: with heads split across ranks they would need
    head-sharded loading, so the generated attention refuses TP > 1 with a message instead of loading every head."""
    import importlib
    import json

    from modelgen.runtime import distributed

    path, _ = checkpoint(name)
    spec = CASES[name][1].removesuffix("ForCausalLM").lower()
    module = importlib.import_module(f"modelgen.generated.{target}.{spec}.model")
    config_cls = getattr(importlib.import_module(f"modelgen.generated.{target}.{spec}.config"), cls.replace(
        "Attention", "Config"))
    config = config_cls.from_hf_config(json.loads((path / "config.json").read_text()))
    monkeypatch.setattr(distributed, "tp_size", lambda: 2)
    with pytest.raises(NotImplementedError, match="tensor parallelism 1"):
        getattr(module, cls)(config, 0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gemma2", "gemma3", "olmo", "olmo2", "granite", "stablelm_parallel"])
def test_neuron_buckets_fullgraph_without_recompiles(checkpoint, name):
    """Every prefill/decode bucket of each family's neuron model (soft-caps and windows, two RoPE tables, clip_qkv,
    whole-projection and per-head-weight QK norms, multipliers, the parallel residual) traces with fullgraph=True,
    and serving after warm-up never recompiles and equals HF's greedy tokens (50-180 s each on this CPU)."""
    torch._dynamo.reset()
    path, hf = checkpoint(name)
    # One bucket per path (both prompts pad into 32, the pair decodes in 2): each family's graphs are traced once; the
    # multi-bucket choice and its recompile guard are tests/test_neuron_compile.py's (llama) job.
    buckets = dict(prefill_buckets=[32], decode_buckets=[2], decode_context_buckets=[64])
    llm = LLM(path, target="neuron", dtype="float32", max_model_len=64, block_size=8, max_num_seqs=2, compile=True,
              **buckets)
    llm.runner.warmup()
    prompts = [PROMPT, PROMPT[:10]]
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    torch.compiler.set_stance("fail_on_recompile")
    try:
        got = llm.generate(prompts, params)
    finally:
        torch.compiler.set_stance("default")
    assert got == [hf_greedy(hf, p, 6) for p in prompts]


def test_gemma3_layers_read_their_own_rope_table(checkpoint):
    """Gemma 3's sliding and full layers rotate with different bases: the neuron model builds two cos|sin tables and
    each layer reads the one of its type (rocm: each attention class its own rotary module)."""
    path, hf = checkpoint("gemma3")
    neuron = LLM(path, target="neuron", dtype="float32", max_model_len=64).model
    index = [layer.rope_table for layer in neuron.model.layers]  # layer_types: sliding, sliding, full, sliding
    assert index[0] == index[1] == index[3] != index[2] and sorted(set(index)) == [0, 1]
    assert not torch.equal(neuron.model.rope_cos_sin, neuron.model.rope_cos_sin_1)
    rocm = LLM(path, target="rocm", dtype="float32", max_model_len=64).model
    tables = [layer.self_attn.rotary_emb.cos_sin_cache for layer in rocm.model.layers]
    assert torch.equal(tables[0], tables[1]) and not torch.equal(tables[0], tables[2])


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("target", TARGETS)
def test_gemma3_conditional_generation_read_as_text(tmp_path, target, tied):
    """A Gemma3ForConditionalGeneration checkpoint (tiny SigLIP tower) serves text prompts through specs/gemma3.yaml:
    text_config lifted, language_model.model.* renamed, vision tower and projector ignored; logits and greedy
    tokens equal the HF multimodal model's on a text-only prompt."""
    import transformers

    torch.manual_seed(3)
    text = {k: v for k, v in {**_SIZES, **CASES["gemma3"][2]}.items() if not k.endswith("token_id")}
    text["tie_word_embeddings"] = tied  # untied: transformers 5 saves language_model.lm_head.weight
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    config = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                       image_token_index=150, boi_token_index=151, eoi_token_index=152,
                                       tie_word_embeddings=tied)
    config._attn_implementation = "eager"
    hf = transformers.Gemma3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for n, t in hf.named_parameters():
            if "norm" in n and n.endswith("weight"):
                t.copy_(torch.randn_like(t) * 0.3)
    hf.save_pretrained(tmp_path)
    llm = LLM(tmp_path, target=target, dtype="float32", max_model_len=128, strict_config=True)
    err = (llm.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < PREFILL_ATOL, f"gemma3 multimodal/{target}: prefill logits differ by {err}"
    out = llm.generate([PROMPT], SamplingParams(max_new_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy(hf, PROMPT, 16)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gemma2", "granite", "stablelm", "olmo2", "olmo2_mqa"])
def test_tensor_parallel_2_matches_1(checkpoint, tmp_path, name):
    """TP=2 over gloo: each rank holds 2 of the 4 query heads and 1 KV head (soft-capped, windowed or partially
    rotated; OLMo 2: its slice of the whole-projection q/k norms, the variance all-reduced, the MQA head replicated),
    half the MLP; the layouts, multipliers and caps act on the reduced sums: logits and greedy tokens equal TP=1's."""
    from tests.parity_helpers import assert_tp2_matches_tp1_on

    assert_tp2_matches_tp1_on(checkpoint(name)[0], TARGETS, PROMPT, tmp_path, max_model_len=64, kv_heads=1)
