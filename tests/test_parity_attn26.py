"""Issue 26's attention vocabulary against transformers: Command R+'s per-head QK LayerNorm stored as one
``[heads, head_dim]`` weight (specs/cohere.yaml ``use_qk_norm``; gqa ``qk_norm.scope: stacked``); HunYuan dense's QK
RMSNorm after RoPE (gqa ``qk_norm.after_rope``) and NTK-alpha RoPE (``rope_type: dynamic`` + ``alpha``: a stretched
base, specs/hunyuan_v1_dense.yaml); Llama 4 text's dense layers (specs/llama4.yaml): NoPE layers by no_rope_layers, a
weightless QK RMSNorm after the interleaved RoPE (gqa ``qk_norm: {affine: false, after_rope: true}``) and attention
temperature tuning on the NoPE layers (gqa ``temperature_tuning``) and chunked attention on its RoPE layers (gqa
``chunk_size: attention_chunk_size``: a query sees only the keys of its own ``position // chunk``, NoPE layers attend
globally); its MoE layers (moe ``weight_on_input``, router ``scoring: topk_sigmoid``,
``expert_layout: transposed``) are tested at the end of the file.

Chunked cases use chunks of 8 and 5 tokens under the 24-token prompt, and the 16 greedy tokens cross two more chunk
boundaries; the engine cases run several sequences through the paged cache with chunked prefill, verify-shaped
multi-token steps over the cache (Llama 4 has no MTP head to speculate with; its verify step is this path) and paged
decode across chunk boundaries; the neuron buckets trace with fullgraph=True.

Each case is a tiny random checkpoint (runtime/testing/tiny_models.py: GQA 4 query / 2 KV heads, 4 layers, norm
weights perturbed off their initial constants) with the family's optional features switched on; gates as for the other
families: fp32 prefill logits within 1e-4 and 16 greedy tokens equal to transformers' (teacher-forced), on rocm and
neuron, plus bf16 three-way for one case per family. The negative controls switch each feature off (in modelgen's model
or in the reference) and require the logits to move far past the tolerance.
"""
from __future__ import annotations

import copy

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt
from tests.parity_helpers import (
    assert_bf16_three_way, assert_engine_batch_matches_hf, assert_fp32_parity, assert_neuron_buckets_fullgraph,
    assert_tp2_matches_tp1, hf_logits,
)

TARGETS = ["rocm", "neuron"]
PREFILL_ATOL = 1e-4
PROMPT = tiny_prompt()  # 24 tokens
SCALE = dict(initializer_range=0.1)  # weights 5x transformers' default: logits of order 1, so each feature shows

HUNYUAN_ALPHA = dict(rope_type="dynamic", alpha=1000.0, factor=1.0, rope_theta=10000.0, beta_fast=32, beta_slow=1,
                     mscale=1.0, mscale_all_dim=1.0)
LLAMA4 = dict(moe_layers=[], attention_chunk_size=None, intermediate_size_mlp=80)
# name -> (architecture, config overrides)
CASES: dict[str, tuple[str, dict]] = {
    # Command R+: q_norm [4, 16] and k_norm [2, 16] LayerNorms (own row per head) before the interleaved RoPE.
    "cohere_qk_norm": ("CohereForCausalLM", dict(use_qk_norm=True, logit_scale=0.3, attention_bias=True)),
    # MQA: one KV head, so under TP=2 the k_norm row is held by both ranks.
    "cohere_qk_norm_mqa": ("CohereForCausalLM", dict(use_qk_norm=True, num_key_value_heads=1)),
    # HunYuan: NTK-alpha (with the YaRN leftovers real checkpoints carry under dynamic), q/k/v/o biases.
    "hunyuan_alpha": ("HunYuanDenseV1ForCausalLM", dict(attention_bias=True, rope_parameters=HUNYUAN_ALPHA)),
    "hunyuan_plain": ("HunYuanDenseV1ForCausalLM", dict(tie_word_embeddings=True)),
    # v4 layout: rope_theta + rope_scaling {type: dynamic, alpha, factor}
    "hunyuan_v4_alpha": ("HunYuanDenseV1ForCausalLM", dict(
        rope_theta=5000.0, rope_scaling=dict(type="dynamic", alpha=50.0, factor=1.0))),
    # Llama 4: NoPE on layers 1 and 3, temperature tuning biting from position 3 (floor_scale 4 < the prompt), dense
    # layers of intermediate_size_mlp, biases; then QK norm and tuning off on the interval schedule; then a chunk as
    # long as the context (no key masked, so accepted).
    "llama4": ("Llama4ForCausalLM", dict(LLAMA4, no_rope_layers=[1, 0, 1, 0], floor_scale=4, attn_scale=0.5,
                                         attention_bias=True)),
    "llama4_plain": ("Llama4ForCausalLM", dict(LLAMA4, use_qk_norm=False, attn_temperature_tuning=False,
                                               no_rope_layer_interval=2, tie_word_embeddings=True)),
    "llama4_chunk_is_context": ("Llama4ForCausalLM", dict(LLAMA4, attention_chunk_size=256, floor_scale=8,
                                                          max_position_embeddings=256)),
    # Chunked attention biting: chunks of 8 (block-aligned at block size 4 / 8) and of 5 (never aligned), the RoPE
    # layers chunked and the NoPE layers global, with the other Llama 4 features on.
    "llama4_chunked": ("Llama4ForCausalLM", dict(LLAMA4, attention_chunk_size=8, no_rope_layers=[1, 0, 1, 0],
                                                 floor_scale=4, attn_scale=0.5)),
    "llama4_chunk_5": ("Llama4ForCausalLM", dict(LLAMA4, attention_chunk_size=5, no_rope_layer_interval=2,
                                                 use_qk_norm=False, num_key_value_heads=1)),
}
THREE_WAY = ["cohere_qk_norm", "hunyuan_alpha", "llama4", "llama4_chunked"]

# ------------------------------------------------------------------------------------------------ Llama 4 MoE layers
# Llama4TextMoe on the layers of moe_layers (else every interleave_moe_layer_step-th): top-k of the router logits, the
# selected experts' scores sigmoid(logit) multiplying the expert INPUT, fused gate_up_proj [E, H, 2I] / down_proj
# [E, I, H], plus the shared expert. The tiny config's 4 experts of width 96 (TINY_SIZES); NoPE on layers 1 and 3 in
# the first case, so MoE layers of both attention kinds.
LLAMA4_MOE: dict[str, dict] = {
    "llama4_moe_step2_top2": dict(LLAMA4, moe_layers=None, interleave_moe_layer_step=2, num_experts_per_tok=2,
                                  no_rope_layers=[1, 0, 1, 0], floor_scale=4),
    "llama4_moe_step1_top1": dict(LLAMA4, moe_layers=None, interleave_moe_layer_step=1, num_experts_per_tok=1,
                                  use_qk_norm=False),
    "llama4_moe_listed_top2": dict(LLAMA4, moe_layers=[0, 2], num_experts_per_tok=2, num_local_experts=3),
}
CASES.update({name: ("Llama4ForCausalLM", over) for name, over in LLAMA4_MOE.items()})

THREE_WAY += ["llama4_moe_step2_top2"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            arch, overrides = CASES[name]
            d = tmp_path_factory.mktemp(name)
            cache[name] = (d, make_tiny_checkpoint(d, arch, **SCALE, **overrides))
        return cache[name]

    return get


def _llm(path, target: str, **kw) -> LLM:
    return LLM(path, target=target, dtype="float32", max_model_len=128, **kw)


def _err(llm: LLM, ref: torch.Tensor) -> float:
    return (llm.score(PROMPT).float() - ref).abs().max().item()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_hf_fp32(checkpoint, name, target):
    path, hf = checkpoint(name)
    # strict: every config.json key read or declared irrelevant
    assert_fp32_parity(_llm(path, target, strict_config=True), hf, PROMPT, PREFILL_ATOL, f"{name}/{target}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", THREE_WAY)
def test_against_hf_bf16_three_way(checkpoint, name, target):
    path, hf = checkpoint(name)
    assert_bf16_three_way(path, target, hf, PROMPT, f"{name}/{target}")


def _attentions(llm: LLM):
    return [layer.self_attn for layer in llm.model.model.layers]


@pytest.mark.parametrize("target", TARGETS)
def test_cohere_qk_norm_moves_the_logits(checkpoint, target):
    """Negative controls: the norms switched off, or one weight row per head replaced by the first row (a norm that
    read one [head_dim] weight for every head), are other models."""
    path, hf = checkpoint("cohere_qk_norm")
    ref = hf_logits(hf, PROMPT)
    llm = _llm(path, target)
    assert _err(llm, ref) < PREFILL_ATOL
    for attn in _attentions(llm):
        attn.use_qk_norm = False
    assert _err(llm, ref) > 1e-2
    llm = _llm(path, target)
    with torch.no_grad():
        for attn in _attentions(llm):
            attn.q_norm.weight.copy_(attn.q_norm.weight[:1].expand_as(attn.q_norm.weight))
    assert _err(llm, ref) > 1e-2


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["cohere_qk_norm", "cohere_qk_norm_mqa"])
def test_cohere_qk_norm_tensor_parallel_2_matches_1(checkpoint, tmp_path, target, name):
    """TP=2 over gloo: each rank holds its query heads' rows of q_norm and its KV head's row of k_norm (the MQA head's
    row on both ranks): logits and greedy tokens equal TP=1's."""
    assert_tp2_matches_tp1(checkpoint(name)[0], target, PROMPT, tmp_path)


class _HeadNorm(torch.nn.Module):
    """A projection followed by a per-head norm: HunYuan's q/k norm moved before RoPE."""

    def __init__(self, proj: torch.nn.Module, norm: torch.nn.Module, head_dim: int):
        super().__init__()
        self.proj, self.norm, self.head_dim = proj, norm, head_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        return self.norm(y.view(*y.shape[:-1], -1, self.head_dim)).view(y.shape)


@pytest.mark.parametrize("target", TARGETS)
def test_hunyuan_features_move_the_logits(checkpoint, tmp_path, target):
    """Negative controls: the QK norm switched off, the QK norm before RoPE (transformers' model rewired), and alpha
    dropped (plain RoPE on rope_theta: the same weights in transformers) are each another model."""
    path, hf = checkpoint("hunyuan_alpha")
    ref = hf_logits(hf, PROMPT)
    llm = _llm(path, target)
    assert _err(llm, ref) < PREFILL_ATOL
    with torch.no_grad():
        for attn in _attentions(llm):
            attn.query_layernorm.weight.fill_(1.0)  # the norms' learned weights are read ...
            attn.key_layernorm.weight.fill_(1.0)
    assert _err(llm, ref) > 1e-2
    before = copy.deepcopy(hf)
    for layer in before.model.layers:
        attn = layer.self_attn
        attn.q_proj = _HeadNorm(attn.q_proj, attn.query_layernorm, attn.head_dim)
        attn.k_proj = _HeadNorm(attn.k_proj, attn.key_layernorm, attn.head_dim)
        attn.query_layernorm, attn.key_layernorm = torch.nn.Identity(), torch.nn.Identity()
    moved = hf_logits(before, PROMPT)
    assert (moved - ref).abs().max().item() > 1e-2  # ... and so does the order
    assert _err(_llm(path, target), moved) > 1e-2
    arch, overrides = CASES["hunyuan_alpha"]
    no_alpha = {k: v for k, v in HUNYUAN_ALPHA.items() if k != "alpha"}
    plain = make_tiny_checkpoint(tmp_path / "no_alpha", arch, **SCALE, **dict(overrides, rope_parameters=no_alpha))
    assert _err(_llm(path, target), hf_logits(plain, PROMPT)) > 1e-2


@pytest.mark.parametrize("target", TARGETS)
def test_dynamic_alpha_still_refused_where_not_implemented(tmp_path, target):
    """Llama's spec does not read alpha: a dynamic RoPE with an alpha is refused by name there, not run as plain
    dynamic NTK (the silent case of issue 26)."""
    make_tiny_checkpoint(tmp_path, "LlamaForCausalLM", rope_parameters=HUNYUAN_ALPHA)
    with pytest.raises(Exception, match="alpha"):
        _llm(tmp_path, target)


@pytest.mark.parametrize("target", TARGETS)
def test_llama4_features_move_the_logits(checkpoint, tmp_path, target):
    """Negative controls: the weightless QK norm off, temperature tuning off (both in modelgen's model), and RoPE on
    every layer (transformers' own switch, same weights) are each another model."""
    path, hf = checkpoint("llama4")
    ref = hf_logits(hf, PROMPT)
    llm = _llm(path, target)
    assert _err(llm, ref) < PREFILL_ATOL
    rope_layers = [a for a in _attentions(llm) if hasattr(a, "use_qk_norm")]
    nope_layers = [a for a in _attentions(llm) if hasattr(a, "temperature_tuning")]
    assert len(rope_layers) == len(nope_layers) == 2
    for attn in rope_layers:
        attn.use_qk_norm = False
    assert _err(llm, ref) > 1e-2
    llm = _llm(path, target)
    for attn in _attentions(llm):
        if hasattr(attn, "temperature_tuning"):
            attn.temperature_tuning = False
    assert _err(llm, ref) > 1e-2
    arch, overrides = CASES["llama4"]
    all_rope = make_tiny_checkpoint(tmp_path / "all_rope", arch, **SCALE, **dict(overrides, no_rope_layers=[1] * 4))
    assert _err(_llm(path, target), hf_logits(all_rope, PROMPT)) > 1e-2


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("change, field", [
    (dict(hidden_act="gelu"), "hidden_act"),  # the MLP activation is silu only
])
def test_llama4_refuses_what_it_does_not_generate(tmp_path, target, change, field):
    """What the spec does not generate is refused naming the field, never served as something else."""
    make_tiny_checkpoint(tmp_path, "Llama4ForCausalLM", **SCALE, **dict(LLAMA4, **change))
    with pytest.raises(Exception, match=field):
        _llm(tmp_path, target)


@pytest.mark.parametrize("qk_norm, field", [
    (dict(kind="rms", eps="rms_norm_eps", scope="stacked"), "qk_norm.kind"),  # stacked is a LayerNorm
    (dict(kind="rms", eps="rms_norm_eps", scope="projection", after_rope=True), "qk_norm.after_rope"),
    (dict(kind="layer_norm", eps="rms_norm_eps", affine=False), "qk_norm.affine"),  # weightless is an RMS kind
])
def test_qk_norm_combinations_not_generated_are_spec_errors(tmp_path, qk_norm, field):
    """The new QK-norm options refuse the combinations no template generates, located at the field."""
    import json

    from modelgen.codegen.errors import SpecError
    from modelgen.codegen.lower import compile_spec
    from modelgen.codegen.spec_file import REPO_ROOT
    from modelgen.codegen.yaml_source import load_yaml

    data, _ = load_yaml(REPO_ROOT / "specs" / "llama.yaml")
    data["blocks"]["decoder"]["attention"]["qk_norm"] = qk_norm
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        compile_spec(path)
    data["blocks"]["decoder"]["attention"]["qk_norm"] = dict(kind="rms", eps="rms_norm_eps", after_rope=True)
    path.write_text(json.dumps(data))  # the allowed form compiles
    assert compile_spec(path).blocks[0].attention.qk_norm.after_rope


# ------------------------------------------------------------------------------------------ Llama 4 chunked attention
def _chunks_off(llm: LLM, target: str) -> None:
    """Chunking switched off in modelgen's model (every RoPE layer attends globally)."""
    for attn in _attentions(llm):
        if target == "rocm":
            attn.attn.chunk = None
        elif hasattr(attn, "attention_chunk"):
            attn.attention_chunk = None


@pytest.mark.parametrize("target", TARGETS)
def test_llama4_chunking_moves_the_logits(checkpoint, tmp_path, target):
    """Negative controls: chunking off in modelgen's model, and transformers' model without attention_chunk_size
    (same weights), are each another model; only the RoPE layers carry a chunk."""
    path, hf = checkpoint("llama4_chunked")
    ref = hf_logits(hf, PROMPT)
    llm = _llm(path, target)
    assert _err(llm, ref) < PREFILL_ATOL
    chunks = [a.attn.chunk if target == "rocm" else getattr(a, "attention_chunk", None) for a in _attentions(llm)]
    assert chunks == [8, None, 8, None]  # no_rope_layers [1, 0, 1, 0]: layers 1 and 3 are NoPE, global
    _chunks_off(llm, target)
    assert _err(llm, ref) > 1e-2
    arch, overrides = CASES["llama4_chunked"]
    unchunked = make_tiny_checkpoint(tmp_path / "unchunked", arch, **SCALE,
                                     **dict(overrides, attention_chunk_size=None))
    assert (hf_logits(unchunked, PROMPT) - ref).abs().max().item() > 1e-2
    assert _err(_llm(path, target), hf_logits(unchunked, PROMPT)) > 1e-2


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["llama4_chunked", "llama4_chunk_5"])
def test_llama4_chunked_through_the_engine(checkpoint, target, name):
    """Three sequences of 29, 21 and 13 tokens in one batch over 4-token blocks, prefilled 8 tokens per step (chunked
    prefill), then 12 paged decode steps each (crossing chunk boundaries): every sequence's tokens equal transformers'
    teacher-forced choices. Then one prompt fed 3 tokens per step over its cached prefix (the verify shape of a
    speculative step): every position's logits equal transformers'."""
    path, hf = checkpoint(name)
    assert_engine_batch_matches_hf(path, hf, target, name)


def test_llama4_chunked_runs_the_torch_path_on_gpu(checkpoint, monkeypatch):
    """On a GPU a chunked layer takes the torch references (the Triton kernels have no chunk mask) with its reason
    named, and a NoPE layer of the same model keeps the kernels."""
    import types

    from modelgen.runtime.layers.attention import layer as attn_layer

    path, hf = checkpoint("llama4_chunked")
    llm = _llm(path, "rocm")
    kernel_layers = []

    def kernel(self, q, k, v, meta, *args, **kw):  # records the layer, then computes what the kernels would
        kernel_layers.append(self.layer_name)
        monkeypatch.setattr(attn_layer, "gpu", types.SimpleNamespace(enabled=lambda x: False))
        try:
            return self.forward(q, k, v, meta)
        finally:
            monkeypatch.setattr(attn_layer, "gpu", types.SimpleNamespace(enabled=lambda x: True))

    monkeypatch.setattr(attn_layer, "gpu", types.SimpleNamespace(enabled=lambda x: True))
    monkeypatch.setattr(attn_layer.PagedAttention, "_forward_gpu", kernel)
    assert _err(llm, hf_logits(hf, PROMPT)) < PREFILL_ATOL
    assert set(kernel_layers) == {"layers.1.self_attn", "layers.3.self_attn"}  # the NoPE (unchunked) layers
    reasons = [a.attn.torch_only for a in _attentions(llm)]
    assert reasons[0] == reasons[2] == attn_layer.TORCH_ONLY["chunk"] and reasons[1] is reasons[3] is None


@pytest.mark.slow
def test_llama4_chunked_neuron_buckets_fullgraph(checkpoint):
    """Every prefill / decode bucket of the chunked model traces with fullgraph=True, and serving after warm-up
    (contexts past several chunks, two sequences) never recompiles and equals transformers."""
    path, hf = checkpoint("llama4_chunked")
    assert_neuron_buckets_fullgraph(path, hf, [PROMPT, PROMPT[:13]], prefill_buckets=[16, 64], decode_buckets=[1, 2],
                                    decode_context_buckets=[64])


# ------------------------------------------------------------------------------------------ Llama 4 MoE layers (tests)
def _moe_blocks(llm: LLM):
    return [layer.feed_forward for layer in llm.model.model.layers if hasattr(layer.feed_forward, "router")
            or hasattr(layer.feed_forward, "router_weight")]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, moe_layers", [("llama4_moe_step2_top2", [1, 3]), ("llama4_moe_step1_top1", [0, 1, 2, 3]),
                                              ("llama4_moe_listed_top2", [0, 2])])
def test_llama4_moe_layers_follow_the_schedule(checkpoint, name, moe_layers, target):
    """moe_layers / interleave_moe_layer_step pick the MoE layers as transformers' is_moe_layer does; the others
    keep the dense MLP of intermediate_size_mlp."""
    path, hf = checkpoint(name)
    assert [i for i, layer in enumerate(hf.model.layers) if layer.is_moe_layer] == moe_layers
    llm = _llm(path, target)
    ours = [i for i, layer in enumerate(llm.model.model.layers) if type(layer.feed_forward).__name__.endswith("MoeBlock")]
    assert ours == moe_layers


@pytest.mark.parametrize("target", TARGETS)
def test_llama4_moe_features_move_the_logits(checkpoint, target):
    """Negative controls: the routing weight on the expert output instead of its input, the shared expert dropped,
    and the fused gate_up_proj read as up-then-gate are each another model."""
    path, hf = checkpoint("llama4_moe_step2_top2")
    ref = hf_logits(hf, PROMPT)
    llm = _llm(path, target)
    assert _err(llm, ref) < PREFILL_ATOL
    blocks = _moe_blocks(llm)
    assert len(blocks) == 2
    for block in blocks:
        (block if target == "neuron" else block.experts).weight_on_input = False  # scales the output instead
    assert _err(llm, ref) > 1e-2
    llm = _llm(path, target)
    with torch.no_grad():
        for block in _moe_blocks(llm):
            for p in block.shared_expert.parameters():
                p.zero_()
    assert _err(llm, ref) > 1e-2
    llm = _llm(path, target)
    with torch.no_grad():
        for block in _moe_blocks(llm):
            w13 = block.experts_w13_weight if target == "neuron" else block.experts.w13_weight
            w13.copy_(torch.cat(w13.chunk(2, dim=1)[::-1], dim=1))
    assert _err(llm, ref) > 1e-2


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_llama4_chunked_tensor_parallel_2_matches_1(checkpoint, tmp_path, target):
    """TP=2 over gloo: each rank's heads keep the chunk mask; logits and greedy tokens equal TP=1's."""
    assert_tp2_matches_tp1(checkpoint("llama4_chunked")[0], target, PROMPT, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ep", [2, 1])  # whole experts per rank (EP=2) / every expert TP-sharded (EP=1)
def test_llama4_moe_expert_and_tp_sharded_experts_equal_1(checkpoint, target, ep):
    """TP=2 started by LLM: experts split by whole experts or by intermediate slices (the transposed gate_up read as
    two column ranges), the shared expert TP-sharded; logits and greedy tokens equal TP=1's."""
    from tests.parity_helpers import assert_tp2_experts_match_1

    assert_tp2_experts_match_1(checkpoint("llama4_moe_step2_top2")[0], target, PROMPT, ep)


@pytest.mark.slow
def test_llama4_moe_neuron_traces_fullgraph(checkpoint):
    """The shape-static MoE with the weight on the input traces under torch.compile(fullgraph=True) with static
    buckets, no recompiles after warm-up, and gives the eager tokens."""
    from modelgen.runtime.engine.sampler import SamplingParams

    torch._dynamo.reset()
    path, _ = checkpoint("llama4_moe_step2_top2")
    kwargs = dict(target="neuron", dtype="float32", max_model_len=64, block_size=8, max_num_seqs=2,
                  prefill_buckets=[32], decode_buckets=[1, 2])
    llm = LLM(path, compile=True, **kwargs)
    llm.runner.warmup()
    params = SamplingParams(max_tokens=5, ignore_eos=True)
    torch.compiler.set_stance("fail_on_recompile")
    try:
        got = llm.generate_ids([PROMPT, PROMPT[:5]], params)
    finally:
        torch.compiler.set_stance("default")
    assert got == LLM(path, **kwargs).generate_ids([PROMPT, PROMPT[:5]], params)
