"""Mamba2 (specs/mamba2.yaml, the mamba2 kind, one-sub-layer blocks) vs transformers' Mamba2ForCausalLM on tiny
random checkpoints.

Cases cover what Mamba2Config can switch: n_groups 1 and > 1, the conv bias on and off, in/out projection biases,
a time_step_limit that clamps dt from both sides, conv kernels 4 and 3, scan chunks smaller than the prompt (so the
chunked scan carries state across chunks) or larger, tied and untied embeddings. Gates as for the other families:
fp32 prefill logits within 1e-4 and 16 greedy tokens equal to transformers' (teacher-forced full forwards: HF's
whole-sequence path is its chunked scan, which applies time_step_limit), on rocm and neuron. The negative controls
zero the SSM's state input (decay) or drop the time_step_limit and show the logits move.
"""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.hf_config import ConfigError
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt
from tests.parity_helpers import (
    assert_chunked_prefill_equals_one_shot,
    assert_interleaved_equal_solo,
    assert_matches_hf,
    assert_preemption_restarts_fresh,
    checkpoint_cache,
    hf_logits,
    llm,
)

TARGETS = ["rocm", "neuron"]
PREFILL_ATOL = 1e-4
PROMPT = tiny_prompt()
# logits of order 1 (initializer_range 0.1); dt_bias spread so that decays differ per head
SCALE = dict(initializer_range=0.1, time_step_min=0.01, time_step_max=0.5)

CASES: dict[str, dict] = {
    # tiny defaults: 8 heads of 16, 2 groups, state 16, chunks of 8 (the prompt spans 3), conv bias, no proj bias
    "mamba2": dict(),
    # every feature on: proj biases, clamped dt, one group, kernel 3, tied embeddings, a chunk of 5
    "mamba2_features": dict(use_bias=True, time_step_limit=(0.05, 0.3), n_groups=1, conv_kernel=3,
                            tie_word_embeddings=True, chunk_size=5),
    # features off: no conv bias, 4 groups, one chunk for the whole prompt
    "mamba2_plain": dict(use_conv_bias=False, n_groups=4, chunk_size=64),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return checkpoint_cache(tmp_path_factory,
                            lambda d, name, _: make_tiny_checkpoint(d, "Mamba2ForCausalLM", **SCALE, **CASES[name]))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_hf_mamba2_fp32(checkpoint, name, target):
    assert_matches_hf(*checkpoint(name), target, PROMPT, name)


def test_hf_generate_agrees_without_a_limit(checkpoint):
    """Where dt is not clamped, transformers' cached generate() (its own recurrent decode step) gives our tokens."""
    path, hf = checkpoint("mamba2")
    with torch.no_grad():
        want = hf.generate(torch.tensor([PROMPT]), max_new_tokens=16, do_sample=False)[0, len(PROMPT):].tolist()
    assert llm(path, "rocm").generate_ids([PROMPT], SamplingParams(max_tokens=16, ignore_eos=True))[0] == want


def test_ssm_state_and_time_step_limit_matter(checkpoint):
    """Negative controls: a zero A_log -> decay exp(-dt) altered, and the clamp dropped, each move the logits."""
    path, hf = checkpoint("mamba2_features")
    ref = hf_logits(hf, PROMPT)
    model = llm(path, "rocm")
    assert (model.score(PROMPT).float() - ref).abs().max().item() < PREFILL_ATOL
    mixers = [layer.mixer for layer in model.model.backbone.layers]
    for m in mixers:
        m.time_step_limit = (0.0, float("inf"))
    assert (model.score(PROMPT).float() - ref).abs().max().item() > 1e-3
    for m in mixers:
        m.time_step_limit = (0.05, 0.3)
        with torch.no_grad():
            m.A_log.zero_()
    assert (model.score(PROMPT).float() - ref).abs().max().item() > 1e-3


# ------------------------------------------------------------------------------- per-request state in the engine
@pytest.mark.parametrize("target", TARGETS)
def test_interleaved_requests_each_get_their_solo_tokens(checkpoint, target):
    assert_interleaved_equal_solo(checkpoint("mamba2_features")[0], target, [PROMPT, PROMPT[:5], PROMPT[7:20], [3]])


def test_preempted_and_reused_slots_start_fresh(checkpoint):
    assert_preemption_restarts_fresh(checkpoint("mamba2")[0], [PROMPT, PROMPT[4:], PROMPT[:9]])


@pytest.mark.parametrize("target", TARGETS)
def test_chunked_prefill_equals_one_shot(checkpoint, target):
    assert_chunked_prefill_equals_one_shot(checkpoint("mamba2")[0], target, PROMPT)


def test_decode_steps_equal_prefill_of_the_same_tokens(checkpoint):
    """Logits of each decode step (the recurrent step) == the teacher-forced prefill (chunked scan) over the same
    tokens, with the clamp on."""
    path, _ = checkpoint("mamba2_features")
    model = llm(path, "rocm")
    out = model.generate_ids([PROMPT], SamplingParams(max_tokens=8, ignore_eos=True))[0]
    assert model.score(PROMPT + out)[len(PROMPT) - 1:-1].argmax(-1).tolist() == out


@pytest.mark.parametrize("target", TARGETS)
def test_heads_not_a_multiple_of_groups_are_refused_with_the_spec_message(tmp_path, target):
    import json

    make_tiny_checkpoint(tmp_path, "Mamba2ForCausalLM")
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["n_groups"] = 3
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"config\.json: specs/mamba2\.yaml: num_heads must be a multiple of "
                                          r"n_groups"):
        llm(tmp_path, target)
