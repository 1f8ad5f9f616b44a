"""DBRX (specs/dbrx.yaml) against transformers' DbrxForCausalLM (issue 26).

Feature-on configs beyond `modelgen verify`'s defaults: attn_config.clip_qkv binding (0.3, 0.5) and off (null),
ffn_config.moe_normalize_expert_weights 1 (divided by the sum) and null (left as they are), moe_top_k 1, 2 and 3 of 4
experts, another rope_theta; DBRX's flat expert tensors (w1 / v1 / w2, each [E * I, H]) are the only layout DBRX
stores. Gates: fp32 prefill logits within 1e-4 and 16 greedy tokens equal to transformers' (teacher-forced), bf16
three-way for one case, on rocm and neuron. Negative controls: clip_qkv off, the renormalisation off, the gate and up
tensors swapped each move the logits; moe_normalize_expert_weights 2 and 1.5 (p-norms) run as such, and dividing by
the sum instead moves the logits; a p that is not positive is refused by name.

transformers 5.25's DbrxAttention cannot run with clip_qkv null (torch.clamp refuses min=max=None): for that case
the reference's clip is set to 1e30 after saving (no entry is clamped, which is what null means).
"""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.hf_config import ConfigError
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint
from tests.family_parity import (
    PREFILL_ATOL, PROMPT, TARGETS, assert_bf16_three_way, assert_fp32_parity, checkpoint_getter, err_after,
)
from tests.parity_helpers import assert_tp2_experts_match_1, hf_logits, llm

ARCH = "DbrxForCausalLM"
SIZES = dict(initializer_range=0.1, d_model=64, n_heads=4, n_layers=4, max_seq_len=256)


def dbrx(clip_qkv, top_k: int, p, theta: float = 10000.0, **overrides) -> dict:
    return dict(SIZES, attn_config=dict(kv_n_heads=2, rope_theta=theta, clip_qkv=clip_qkv),
                ffn_config=dict(ffn_hidden_size=32, moe_num_experts=4, moe_top_k=top_k, moe_normalize_expert_weights=p),
                rope_parameters=dict(rope_type="default", rope_theta=theta), **overrides)


CASES: dict[str, dict] = {
    "clip_sum_norm": dbrx(clip_qkv=0.3, top_k=2, p=1.0),
    "no_clip_no_norm": dbrx(clip_qkv=None, top_k=3, p=None),
    "top1": dbrx(clip_qkv=0.5, top_k=1, p=1.0, theta=500.0),
    # p-norms other than the sum: the top-k weights divided by torch.norm(w, p)
    "p2_norm": dbrx(clip_qkv=0.3, top_k=2, p=2.0),
    "p1_5_norm": dbrx(clip_qkv=None, top_k=3, p=1.5, theta=500.0),
}


def _runnable(hf, overrides: dict):
    """transformers' DBRX with clip_qkv null cannot run (see the module docstring): clip far above every value."""
    if overrides["attn_config"]["clip_qkv"] is None:
        for block in hf.transformer.blocks:
            block.norm_attn_norm.attn.clip_qkv = 1e30
    return hf


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return checkpoint_getter(tmp_path_factory, lambda d, name: _runnable(make_tiny_checkpoint(d, ARCH, **CASES[name]),
                                                                          CASES[name]))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_dbrx_fp32(checkpoint, name, target):
    path, hf = checkpoint(name)
    assert_fp32_parity(path, hf, name, target)


@pytest.mark.parametrize("target", TARGETS)
def test_against_dbrx_bf16_three_way(checkpoint, target):
    path, hf = checkpoint("clip_sum_norm")
    assert_bf16_three_way(path, hf, "dbrx", target)


@pytest.mark.parametrize("target", TARGETS)
def test_each_feature_moves_the_logits(checkpoint, target):
    """Parity means the features are implemented: each, switched off, moves the logits far past PREFILL_ATOL."""
    path, hf = checkpoint("clip_sum_norm")
    ref = hf_logits(hf, PROMPT)
    layers = lambda m: m.transformer.layers  # noqa: E731
    assert err_after(path, ref, lambda m: None, target) < PREFILL_ATOL
    assert err_after(path, ref, lambda m: [setattr(x.attn, "clip_qkv", None) for x in layers(m)], target) > 1e-2

    def no_renormalize(m):
        for x in layers(m):
            setattr(x.ffn if target == "neuron" else x.ffn.router, "renormalize", False)
    assert err_after(path, ref, no_renormalize, target) > 1e-2

    def swap_gate_up(m):  # w1 read as up and v1 as gate
        for x in layers(m):
            w13 = x.ffn.experts_w13_weight if target == "neuron" else x.ffn.experts.w13_weight
            w13.copy_(torch.cat(w13.chunk(2, dim=1)[::-1], dim=1))
    assert err_after(path, ref, swap_gate_up, target) > 1e-2


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["p2_norm", "p1_5_norm"])
def test_p_norm_moves_the_logits(checkpoint, name, target):
    """The p-norm is read: the same checkpoint divided by the sum of its top-k weights (p = 1) is another model."""
    path, hf = checkpoint(name)
    ref = hf_logits(hf, PROMPT)

    def as_sum(m):
        for x in m.transformer.layers:
            setattr(x.ffn if target == "neuron" else x.ffn.router, "renormalize_p", 1.0)
    assert err_after(path, ref, lambda m: None, target) < PREFILL_ATOL
    assert err_after(path, ref, as_sum, target) > 1e-2


@pytest.mark.parametrize("target", TARGETS)
def test_p_norm_not_positive_is_refused(tmp_path, target):
    make_tiny_checkpoint(tmp_path, ARCH, **dbrx(clip_qkv=0.3, top_k=2, p=0.0))
    with pytest.raises(ConfigError, match="moe_normalize_expert_weights"):
        llm(tmp_path, target, max_model_len=128)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ep", [2, 1])  # whole experts per rank (EP=2) / every expert TP-sharded (EP=1)
def test_p_norm_expert_and_tp_sharded_experts_equal_1(checkpoint, target, ep):
    """TP=2 started by LLM with p = 2: the routing (replicated) and the flat experts split by whole experts or by
    intermediate slices give TP=1's logits and greedy tokens."""
    assert_tp2_experts_match_1(checkpoint("p2_norm")[0], target, PROMPT, ep)
