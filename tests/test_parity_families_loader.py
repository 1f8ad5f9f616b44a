"""Qwen2, Mistral, Phi-3 and Qwen2-MoE (specs/{qwen2,mistral,phi3,qwen2_moe}.yaml) vs transformers, both targets.

Tiny random checkpoints written by ``save_pretrained``: GQA (4 query heads over 2 KV heads), 3-4 layers, and where a
family has sliding windows a window (5) well below the 20-token prompt, so the windowed layers drop most of the
prompt during prefill and every decode step. Gates as in the other parity tests: fp32 prefill logits within 1e-4 and
16 greedy tokens equal to transformers' (teacher-forced full forwards, no HF cache); three-way bf16 (HF fp32 gold, HF
bf16 floor, modelgen bf16 within 2x the floor's error + atol).

Phi-3 checkpoints store ``qkv_proj`` and ``gate_up_proj`` already fused: they load through ``checkpoint.split``
(runtime/loader/split.py), tested here also for a mis-shaped fused tensor and with TP=2 shards on both loaders.
"""
from __future__ import annotations

import copy
import re

import pytest
import torch

from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.testing import assert_close_three_way
from tests.parity_helpers import checkpoint_cache, hf_greedy_forward, hf_logits, llm
from tests.test_parity_llama import THREE_WAY_ATOL, THREE_WAY_FACTOR

TARGETS = ["rocm", "neuron"]
MOE_THREE_WAY_ATOL = 1e-2  # router near-ties in bf16 (as tests/test_parity_moe.py)
PROMPT = [int(t) for t in torch.randint(3, 160, (20,), generator=torch.Generator().manual_seed(11))]

BASE = dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            initializer_range=0.05)

# name -> (transformers model class, config class, config kwargs, moe?)
CASES = {
    # Qwen2: q/k/v biases; no window (use_sliding_window false leaves sliding_window null in config.json)
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", dict(tie_word_embeddings=True), False),
    # Qwen2 with a window of 5 on layers >= max_window_layers (1, 2, 3): the layer_types HF writes decide
    "qwen2_window": ("Qwen2ForCausalLM", "Qwen2Config",
                     dict(num_hidden_layers=4, use_sliding_window=True, sliding_window=5, max_window_layers=1), False),
    # Mistral: every layer windowed (5 < prompt), head_dim override
    "mistral_window": ("MistralForCausalLM", "MistralConfig", dict(sliding_window=5, head_dim=24), False),
    "mistral_full": ("MistralForCausalLM", "MistralConfig", dict(sliding_window=None), False),
    # Phi-3: fused qkv_proj / gate_up_proj in the checkpoint (checkpoint.split), half the head dims rotated, window 5
    "phi3_window": ("Phi3ForCausalLM", "Phi3Config", dict(partial_rotary_factor=0.5, sliding_window=5), False),
    "phi3": ("Phi3ForCausalLM", "Phi3Config", dict(num_hidden_layers=4, num_key_value_heads=1,
                                                   tie_word_embeddings=True), False),
    # Qwen2-MoE: softmax top-2 of 8 without renormalisation, a dense layer by mlp_only_layers, the gated shared expert
    "qwen2_moe": ("Qwen2MoeForCausalLM", "Qwen2MoeConfig",
                  dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                       shared_expert_intermediate_size=48, norm_topk_prob=False, mlp_only_layers=[1]), True),
    # Qwen2-MoE, renormalised top-3, decoder_sparse_step 2 (layers 1, 3 sparse), windows on even layers < 3, no bias
    "qwen2_moe_window": ("Qwen2MoeForCausalLM", "Qwen2MoeConfig",
                         dict(num_hidden_layers=4, num_experts=8, num_experts_per_tok=3, moe_intermediate_size=32,
                              shared_expert_intermediate_size=40, norm_topk_prob=True, decoder_sparse_step=2,
                              qkv_bias=False, use_sliding_window=True, sliding_window=5, max_window_layers=3), True),
}


def make(path, name: str, fused: bool = False, seed: int = 0):
    """Save a tiny random HF model of ``CASES[name]`` (biases drawn at a visible scale) and return it (fp32)."""
    import transformers

    model_cls, cfg_cls, extra, _ = CASES[name]
    torch.manual_seed(seed)
    config = getattr(transformers, cfg_cls)(**{**BASE, **extra})
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():  # HF zero-initialises biases; random values make a dropped one visible
        for n, t in model.named_parameters():
            if n.endswith(".bias"):
                t.normal_(0, 0.1)
    model.save_pretrained(path, save_original_format=not fused)
    return model


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return checkpoint_cache(tmp_path_factory, make)


FP32 = [(n, False) for n in CASES] + [(n, True) for n in CASES if CASES[n][3]]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, fused", FP32, ids=[n + ("-fused" if f else "") for n, f in FP32])
def test_against_hf_fp32(checkpoints, name, fused, target):
    path, hf = checkpoints(name, fused)
    model = llm(path, target, strict_config=True)  # every config.json key read or declared irrelevant by the spec
    err = (model.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < 1e-4, f"{name}/{target}: prefill logits differ by {err}"
    out = model.generate([PROMPT], SamplingParams(max_new_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy_forward(hf, PROMPT, 16), f"{name}/{target}: greedy tokens differ"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_hf_bf16_three_way(checkpoints, name, target):
    path, hf = checkpoints(name)
    gold = hf_logits(hf, PROMPT)
    floor = hf_logits(copy.deepcopy(hf).to(torch.bfloat16), PROMPT)
    ours = llm(path, target, dtype="bfloat16").score(PROMPT).float()
    atol = MOE_THREE_WAY_ATOL if CASES[name][3] else THREE_WAY_ATOL
    assert_close_three_way(gold, floor, ours, factor=THREE_WAY_FACTOR, atol=atol, name=f"{name}/{target}")


@pytest.mark.parametrize("name", ["qwen2_window", "mistral_window", "mistral_full", "qwen2_moe_window", "phi3_window"])
def test_windows_where_hf_has_them(checkpoints, name):
    """Each layer's window equals the one HF's attention mask uses (layer_types / config.sliding_window)."""
    path, hf = checkpoints(name)
    model = llm(path, "rocm")
    ours = [layer.self_attn.attn.sliding_window for layer in model.model.model.layers]
    cfg = hf.config
    types = getattr(cfg, "layer_types", None) or ["sliding_attention" if cfg.sliding_window else "full_attention"] * len(ours)
    theirs = [cfg.sliding_window if t == "sliding_attention" else None for t in types]
    assert ours == theirs
    assert any(w is not None for w in theirs) == (name != "mistral_full")


def test_qwen2_moe_schedule(checkpoints):
    """Sparse layers exactly where HF has experts (mlp_only_layers, decoder_sparse_step)."""
    from modelgen.runtime.layers.moe import FusedMoE

    for name, want in (("qwen2_moe", [True, False, True]), ("qwen2_moe_window", [False, True, False, True])):
        path, hf = checkpoints(name)
        model = llm(path, "rocm")
        ours = [isinstance(getattr(layer.mlp, "experts", None), FusedMoE) for layer in model.model.model.layers]
        assert ours == [hasattr(layer.mlp, "experts") for layer in hf.model.layers] == want


# ------------------------------------------------------------------------------------------------ checkpoint.split
def _rewrite(src, dst, edit) -> None:
    """Copy checkpoint ``src`` to ``dst`` with its tensors passed through ``edit(dict) -> dict``."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    f = dst / "model.safetensors"
    save_file(edit(load_file(f)), f, metadata={"format": "pt"})


@pytest.mark.parametrize("target", TARGETS)
def test_split_refuses_a_misshaped_fused_tensor(checkpoints, tmp_path, target):
    """A stored qkv_proj whose rows are not q + k + v from config.json: one line naming the file, the tensor, the
    expected sizes and the actual shape (here: the checkpoint was written for 2 KV heads, the config says 1)."""
    from modelgen.runtime.loader.checkpoint import CheckpointError

    path, _ = checkpoints("phi3_window")
    bad = tmp_path / "bad"
    key = "model.layers.1.self_attn.qkv_proj.weight"
    _rewrite(path, bad, lambda t: {**t, key: t[key][:-16]})  # drop 16 rows (one KV head of v)
    with pytest.raises(CheckpointError) as e:
        llm(bad, target)
    msg = str(e.value)
    assert "\n" not in msg
    assert str(bad / "model.safetensors") in msg and f"'{key}'" in msg, msg
    assert "shape (112, 64)" in msg and "expects dim 0 = 128 (q_proj 64 + k_proj 32 + v_proj 32" in msg, msg


@pytest.mark.parametrize("target", TARGETS)
def test_split_part_used_by_no_parameter_is_reported(checkpoints, tmp_path, target):
    """Strict coverage: a stored fused tensor whose parts are not all consumed is never silently half-loaded."""
    from modelgen.runtime.loader.checkpoint import CheckpointError

    path, _ = checkpoints("phi3_window")
    extra = tmp_path / "extra"
    key = "model.layers.0.mlp.gate_up_proj.weight"
    # a second stored-fused tensor under a module no parameter has: its parts route nowhere
    _rewrite(path, extra, lambda t: {**t, "model.layers.0.mlp2.gate_up_proj.weight": t[key].clone()})
    with pytest.raises(CheckpointError, match=r"mlp2\.gate_up_proj\.weight"):
        llm(extra, target)


def test_split_spec_errors_are_located(tmp_path):
    import shutil

    from modelgen.codegen.errors import SpecError
    from modelgen.codegen.lower import compile_spec
    from tests.test_spec_errors import line_col_of

    for f in ("llama.yaml", "phi3.yaml"):
        shutil.copy(f"specs/{f}", tmp_path / f)
    p = tmp_path / "phi3.yaml"
    text = p.read_text()
    p.write_text(text.replace("{gate_proj: intermediate_size, up_proj: intermediate_size}",
                              "{gate_proj: intermediate_size, q_proj: intermediate_size}")
                 .replace("k_proj: num_key_value_heads * head_dim", "k_proj: num_key_value_head * head_dim"))
    with pytest.raises(SpecError) as e:
        compile_spec(p)
    msg = str(e.value)
    line, _ = line_col_of(p, "q_proj: intermediate_size")
    assert re.search(rf"phi3.yaml:{line}:\d+: checkpoint.split.gate_up_proj.parts.q_proj: part 'q_proj' is already a "
                     r"part of split 'qkv_proj'", msg), msg
    assert "checkpoint.split.qkv_proj.parts.k_proj: undefined config field 'num_key_value_head'" in msg, msg


@pytest.mark.slow
def test_split_tensor_parallel_2_matches_1(checkpoints, tmp_path):
    """TP=2 (gloo): each rank takes its heads of each of q, k, v and its rows of gate and up out of the fused
    tensors (neuron reads only those rows); logits and tokens equal TP=1."""
    from tests.parity_helpers import assert_tp2_matches_tp1_on

    assert_tp2_matches_tp1_on(checkpoints("phi3_window")[0], TARGETS, PROMPT, tmp_path, max_model_len=64, kv_heads=1)


@pytest.mark.parametrize("target", TARGETS)
def test_split_coverage_from_headers(checkpoints, tmp_path, target):
    """`modelgen coverage` (headers only, meta tensors) runs the same split: TP=2 ranks each get half the heads of
    the fused qkv_proj, and a mis-shaped fused tensor fails on every rank with the split's one-line error."""
    import importlib

    from modelgen.cli.coverage import checkpoint_coverage

    module = importlib.import_module(f"modelgen.generated.{target}.phi3")
    path, _ = checkpoints("phi3_window")
    report = checkpoint_coverage(module, path, target=target, tp=2)
    assert report.passed, report.format()
    qkv = "model.layers.0.self_attn.qkv_proj" + (".weight" if target == "rocm" else "_weight")
    shapes = [dict((n, s) for n, s, _ in r.parameters)[qkv] for r in report.ranks]
    assert sorted(shapes[0]) == sorted(shapes[1]) == [32 + 16 + 16, 64]  # per rank: 2 of 4 q heads, 1 of 2 KV heads
    bad = tmp_path / "bad"
    key = "model.layers.1.self_attn.qkv_proj.weight"
    _rewrite(path, bad, lambda t: {**t, key: t[key][:-16].contiguous()})
    report = checkpoint_coverage(module, bad, target=target, tp=2)
    assert not report.passed and all("checkpoint.split 'qkv_proj' expects dim 0 = 128" in r.error for r in report.ranks)
