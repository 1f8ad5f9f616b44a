"""Nemotron-H (specs/nemotron_h.yaml: one-sub-layer blocks -- mamba2 mixers, NoPE GQA attention, ungated ReLU^2
MLPs -- by layers_block_type or hybrid_override_pattern) vs transformers' NemotronHForCausalLM on tiny random
checkpoints.

Cases cover what NemotronHConfig can switch (the MoE's latent projection aside, which the spec refuses; the MoE layers
at the end of the file): three schedules, given as
transformers 5's layers_block_type or as the pattern string of earlier configs (M, *, -), Mamba-2 groups 1 and 2,
the conv bias on and off, the mixer's in/out projection biases, a time_step_limit that clamps dt, conv kernels 4 and
3, MLP biases; tie_word_embeddings set (transformers' NemotronH ties nothing whatever it says, and neither
does the spec). Gates as for the other families: fp32 prefill logits within 1e-4 and 16
greedy tokens equal to transformers' (teacher-forced full forwards), on rocm and neuron.
"""
from __future__ import annotations

import json

import pytest

from modelgen.runtime.hf_config import ConfigError
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt
from tests.parity_helpers import (
    assert_chunked_prefill_equals_one_shot,
    assert_tp2_experts_match_1,
    assert_interleaved_equal_solo,
    assert_matches_hf,
    assert_preemption_restarts_fresh,
    hf_logits,
    llm,
)

TARGETS = ["rocm", "neuron"]
PREFILL_ATOL = 1e-4
PROMPT = tiny_prompt()
SCALE = dict(initializer_range=0.1)  # logits of order 1, so every layer's contribution shows
TYPES = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}

# name -> (schedule pattern, config overrides, write the schedule as hybrid_override_pattern instead)
CASES: dict[str, tuple[str, dict, bool]] = {
    "nemotron_h": ("M-*M", {}, False),
    # every feature on; the schedule in the legacy pattern string
    "nemotron_h_features": ("*M-M", dict(use_bias=True, time_step_limit=(0.05, 0.3), n_groups=1, conv_kernel=3,
                                         mlp_bias=True, tie_word_embeddings=True, chunk_size=5), True),
    # features off: no conv bias, one scan chunk for the whole prompt
    "nemotron_h_plain": ("MM-*", dict(use_conv_bias=False, chunk_size=64), False),
    # MoE layers (NemotronHMoE): 8 non-gated ReLU^2 experts, top-2 of 2 groups keeping 1 (TINY_SIZES), correction bias
    # perturbed off zero, norm_topk_prob, routed scaling 2.5, biased shared expert; fused expert tensors below
    "nemotron_h_moe": ("ME*-", dict(routed_scaling_factor=2.5, mlp_bias=True), False),
    # 4 groups keeping 2, top-3, no renormalisation, two MoE layers; the legacy pattern string (transformers 5.25 cannot
    # run a schedule whose first layer is MoE or MLP: its cache asks layer 0 for the sequence length)
    "nemotron_h_moe_groups": ("ME*E", dict(n_group=4, topk_group=2, num_experts_per_tok=3, norm_topk_prob=False,
                                           routed_scaling_factor=0.7), True),
    # one group (plain top-k), top-1, scaling 1
    "nemotron_h_moe_one_group": ("*E", dict(n_group=1, topk_group=1, num_experts_per_tok=1), False),
}
FUSED = {"nemotron_h_moe"}  # saved with transformers v5's fused expert tensors (experts.up_proj [E, I, H])


def _as_pattern(path, pattern: str) -> None:
    """config.json as earlier Nemotron-H checkpoints write it: the schedule as hybrid_override_pattern."""
    cfg = json.loads((path / "config.json").read_text())
    del cfg["layers_block_type"]
    cfg["hybrid_override_pattern"] = pattern
    (path / "config.json").write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            pattern, over, legacy = CASES[name]
            d = tmp_path_factory.mktemp(name)
            hf = make_tiny_checkpoint(d, "NemotronHForCausalLM", **SCALE, **over, fused_experts=name in FUSED,
                                      layers_block_type=[TYPES[c] for c in pattern])
            if legacy:
                _as_pattern(d, pattern)
            cache[name] = (d, hf)
        return cache[name]

    return get


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_hf_nemotron_h_fp32(checkpoint, name, target):
    assert_matches_hf(*checkpoint(name), target, PROMPT, name)


def test_schedule_and_mlp_blocks(checkpoint):
    """Layer i's only sub-layer follows the pattern (legacy string too); zeroing the MLP block's down_proj moves the
    logits (the MLP-only block is not a pass-through) and MLP blocks declare no cache."""
    import torch

    path, hf = checkpoint("nemotron_h_features")
    model = llm(path, "rocm")
    layers = model.model.backbone.layers
    assert [layer.block for layer in layers] == ["attention", "mamba", "mlp", "mamba"]
    assert len(model.model.get_kv_spec().layers) == 3
    ref = hf_logits(hf, PROMPT)
    assert (model.score(PROMPT).float() - ref).abs().max().item() < PREFILL_ATOL
    with torch.no_grad():
        layers[2].mixer.down_proj.weight.zero_()
    assert (model.score(PROMPT).float() - ref).abs().max().item() > 1e-3


@pytest.mark.parametrize("target", TARGETS)
def test_interleaved_requests_each_get_their_solo_tokens(checkpoint, target):
    assert_interleaved_equal_solo(checkpoint("nemotron_h_features")[0], target,
                                  [PROMPT, PROMPT[:5], PROMPT[7:20], [3]])


def test_preempted_and_reused_slots_start_fresh(checkpoint):
    assert_preemption_restarts_fresh(checkpoint("nemotron_h")[0], [PROMPT, PROMPT[4:], PROMPT[:9]])


@pytest.mark.parametrize("target", TARGETS)
def test_chunked_prefill_equals_one_shot(checkpoint, target):
    assert_chunked_prefill_equals_one_shot(checkpoint("nemotron_h")[0], target, PROMPT)


@pytest.mark.parametrize("target", TARGETS)
def test_moe_latent_projection_is_refused_with_the_spec_message(tmp_path, target):
    make_tiny_checkpoint(tmp_path, "NemotronHForCausalLM", moe_latent_size=32,
                         layers_block_type=["linear_attention", "moe", "full_attention", "mlp"])
    with pytest.raises(ConfigError, match=r"config\.json: specs/nemotron_h\.yaml: moe_latent_size"):
        llm(tmp_path, target)


# ------------------------------------------------------------------------------------------------------ MoE layers
def _moe_blocks(model):
    return [layer.mixer for layer in model.model.backbone.layers if type(layer.mixer).__name__.endswith("MoeBlock")]


@pytest.mark.parametrize("target", TARGETS)
def test_moe_features_move_the_logits(checkpoint, target):
    """Negative controls on the MoE layers (the router's knobs live on the block on neuron, on its gate on rocm):
    the routed scaling set to 1, the renormalisation off, group-limited selection off, the correction bias zeroed
    and the shared expert dropped each move the logits; the experts' ReLU^2 read as ReLU too."""
    import torch

    path, hf = checkpoint("nemotron_h_moe")
    ref = hf_logits(hf, PROMPT)

    def err(edit) -> float:
        model = llm(path, target)
        blocks = _moe_blocks(model)
        assert len(blocks) == 1
        with torch.no_grad():
            for block in blocks:
                edit(block, block if target == "neuron" else block.gate)
        return (model.score(PROMPT).float() - ref).abs().max().item()

    assert err(lambda b, r: None) < PREFILL_ATOL
    assert err(lambda b, r: setattr(r, "routed_scaling_factor", 1.0)) > 1e-2
    assert err(lambda b, r: setattr(r, "renormalize", False)) > 1e-2
    assert err(lambda b, r: setattr(r, "n_group", 1)) > 1e-3
    bias = "gate_e_score_correction_bias" if target == "neuron" else "e_score_correction_bias"
    assert err(lambda b, r: getattr(r, bias).zero_()) > 1e-3
    assert err(lambda b, r: [p.zero_() for p in b.shared_experts.parameters()]) > 1e-2


def test_moe_experts_are_not_gated(checkpoint):
    """The routed experts' first weight is the up projection alone ([E, I, H]); relu instead of relu^2 moves the
    logits (the activation is the squared one)."""
    import torch

    from modelgen.runtime.layers.mlp import relu2

    path, hf = checkpoint("nemotron_h_moe")
    model = llm(path, "rocm")
    (block,) = _moe_blocks(model)
    assert tuple(block.experts.w13_weight.shape) == (8, 32, 64)
    assert block.experts.act is relu2
    ref = hf_logits(hf, PROMPT)
    block.experts.act = torch.relu
    block.experts.activation = torch.relu
    assert (model.score(PROMPT).float() - ref).abs().max().item() > 1e-2


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ep", [2, 1])  # whole experts per rank (EP=2) / every expert TP-sharded (EP=1)
def test_moe_expert_and_tp_sharded_experts_equal_1(checkpoint, target, ep):
    """TP=2 started by LLM: the non-gated experts split by whole experts or by intermediate slices of up (rows) and
    down (columns), the shared expert TP-sharded with its biases; logits and greedy tokens equal TP=1's."""
    for name in ("nemotron_h_moe", "nemotron_h_moe_groups"):  # fused / per-expert tensors
        assert_tp2_experts_match_1(checkpoint(name)[0], target, PROMPT, ep)
