"""Nemotron-H (specs/nemotron_h.yaml: one-sub-layer blocks -- mamba2 mixers, NoPE GQA attention, ungated ReLU^2
MLPs -- by layers_block_type or hybrid_override_pattern) vs transformers' NemotronHForCausalLM on tiny random
checkpoints.

Cases cover what NemotronHConfig can switch (MoE layers aside, which the spec refuses): three schedules, given as
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
TYPES = {"M": "linear_attention", "*": "full_attention", "-": "mlp"}

# name -> (schedule pattern, config overrides, write the schedule as hybrid_override_pattern instead)
CASES: dict[str, tuple[str, dict, bool]] = {
    "nemotron_h": ("M-*M", {}, False),
    # every feature on; the schedule in the legacy pattern string
    "nemotron_h_features": ("*M-M", dict(use_bias=True, time_step_limit=(0.05, 0.3), n_groups=1, conv_kernel=3,
                                         mlp_bias=True, tie_word_embeddings=True, chunk_size=5), True),
    # features off: no conv bias, one scan chunk for the whole prompt
    "nemotron_h_plain": ("MM-*", dict(use_conv_bias=False, chunk_size=64), False),
}


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
            hf = make_tiny_checkpoint(d, "NemotronHForCausalLM", **SCALE, **over,
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
def test_moe_layers_are_refused_with_the_spec_message(tmp_path, target):
    make_tiny_checkpoint(tmp_path, "NemotronHForCausalLM",
                         layers_block_type=["linear_attention", "moe", "full_attention", "mlp"])
    with pytest.raises(ConfigError, match=r"config\.json: specs/nemotron_h\.yaml: MoE layers \('E' / moe"):
        llm(tmp_path, target)
