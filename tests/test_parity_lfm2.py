"""LFM2 (specs/lfm2.yaml, the short_conv kind) vs transformers' Lfm2ForCausalLM on tiny random checkpoints.

Cases cover what Lfm2Config can switch: conv and full-attention layers mixed by layer_types, conv_bias on and off,
conv_L_cache 3 (the default) and 4, and the three ways Lfm2MLP sizes its width (auto-adjust with a multiplier and a
round-up to block_multiple_of that binds or not; no adjustment). Gates as for the other families:
fp32 prefill logits within 1e-4 and 16 greedy tokens equal to transformers' (teacher-forced full forwards), on rocm
and neuron. ``test_conv_state_matters`` is the negative control: zeroing the conv kernel's history taps moves the
logits, so the conv (and its state across tokens) is not a no-op on these fixtures.
"""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.hf_config import ConfigError
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt
from tests.parity_helpers import (
    assert_neuron_buckets_compile,
    assert_tp2_matches_tp1_on,
    hf_greedy_forward,
    hf_logits,
    llm,
)

TARGETS = ["rocm", "neuron"]
PREFILL_ATOL = 1e-4
PROMPT = tiny_prompt()
SCALE = dict(initializer_range=0.1)  # logits of order 1, so the conv's contribution shows
HYBRID = ["conv", "full_attention", "conv", "conv"]

CASES: dict[str, dict] = {
    # int(2/3 * 96) = 64, * 1.5 = 96, rounded up to a multiple of 32: 96
    "lfm2": dict(layer_types=HYBRID, block_multiple_of=32, block_ffn_dim_multiplier=1.5),
    # int(1.0 * 64) = 64 rounded up to a multiple of 48: 96; conv biases; kernel 4
    "lfm2_bias": dict(layer_types=["full_attention", "conv", "conv", "full_attention"], conv_bias=True,
                      conv_L_cache=4, block_multiple_of=48, block_ffn_dim_multiplier=1.0),
    # intermediate_size as given (96), untied head
    "lfm2_plain": dict(layer_types=HYBRID, block_auto_adjust_ff_dim=False, tie_word_embeddings=False),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            d = tmp_path_factory.mktemp(name)
            cache[name] = (d, make_tiny_checkpoint(d, "Lfm2ForCausalLM", **SCALE, **CASES[name]))
        return cache[name]

    return get


def test_mlp_widths_follow_lfm2mlp(checkpoint):
    """The spec's intermediate_size expression gives Lfm2MLP's width in every case (read off HF's own modules)."""
    for name in CASES:
        path, hf = checkpoint(name)
        model = llm(path, "rocm").model
        for ours, theirs in zip(model.model.layers, hf.model.layers):
            assert ours.feed_forward.down_proj.weight.shape[1] == theirs.feed_forward.w2.in_features, name


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_hf_lfm2_fp32(checkpoint, name, target):
    path, hf = checkpoint(name)
    model = llm(path, target, strict_config=True)  # every config.json key read or declared irrelevant
    err = (model.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < PREFILL_ATOL, f"{name}/{target}: prefill logits differ by {err}"
    out = model.generate_ids([PROMPT], SamplingParams(max_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy_forward(hf, PROMPT, 16), f"{name}/{target}: greedy tokens differ"


def test_conv_state_matters(checkpoint):
    """Zeroing every conv tap but the current token's moves the logits far past the tolerance."""
    path, hf = checkpoint("lfm2")
    model = llm(path, "rocm")
    ref = hf_logits(hf, PROMPT)
    assert (model.score(PROMPT).float() - ref).abs().max().item() < PREFILL_ATOL
    with torch.no_grad():
        for layer in model.model.model.layers:
            if hasattr(layer, "conv"):
                layer.conv.conv.weight[..., :-1].zero_()
    assert (model.score(PROMPT).float() - ref).abs().max().item() > 1e-2


# ------------------------------------------------------------------------------- per-request state in the engine
@pytest.mark.parametrize("target", TARGETS)
def test_interleaved_requests_each_get_their_solo_tokens(checkpoint, target):
    """Different lengths in one continuous batch (short ones decode beside longer prefills): no conv state leaks."""
    path, _ = checkpoint("lfm2_bias")
    prompts = [PROMPT, PROMPT[:5], PROMPT[7:20], [3]]
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    together = llm(path, target, max_num_seqs=4).generate_ids(prompts, params)
    alone = [llm(path, target).generate_ids([p], params)[0] for p in prompts]
    assert together == alone


def test_preempted_and_reused_slots_start_fresh(checkpoint):
    """A KV cache too small for both requests forces preemption; the victim restarts from a zeroed conv state, and
    later requests reuse slots that earlier ones left dirty."""
    path, _ = checkpoint("lfm2")
    prompts = [PROMPT, PROMPT[4:], PROMPT[:9]]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    want = [llm(path, "rocm").generate_ids([p], params)[0] for p in prompts]
    tight = llm(path, "rocm", block_size=8, num_blocks=7, max_num_seqs=2)
    assert tight.generate_ids(prompts, params) == want
    assert tight.stats.preemptions > 0
    assert tight.state_pool.num_free == tight.state_pool.num_slots  # every slot returned


@pytest.mark.parametrize("target", TARGETS)
def test_chunked_prefill_equals_one_shot(checkpoint, target):
    path, _ = checkpoint("lfm2_bias")
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    want = llm(path, target).generate_ids([PROMPT], params)[0]
    extra = {"prefill_buckets": [8, 256]} if target == "neuron" else {}
    assert llm(path, target, max_num_batched_tokens=8, **extra).generate_ids([PROMPT], params)[0] == want


def test_decode_steps_equal_prefill_of_the_same_tokens(checkpoint):
    """Logits of each decode step (the one-step conv update) == the teacher-forced prefill over the same tokens."""
    path, _ = checkpoint("lfm2")
    model = llm(path, "rocm")
    out = model.generate_ids([PROMPT], SamplingParams(max_tokens=8, ignore_eos=True))[0]
    assert model.score(PROMPT + out)[len(PROMPT) - 1:-1].argmax(-1).tolist() == out


# ------------------------------------------------------------------------------------ parallelism and compilation
@pytest.mark.slow
def test_tensor_parallel_2_equals_1(checkpoint, tmp_path):
    """Two gloo ranks split the conv's channels (each in_proj third, conv, out_proj's input): same logits, tokens."""
    path, _ = checkpoint("lfm2_bias")  # biases too: each third of in_proj's bias is split like its weight
    assert_tp2_matches_tp1_on(path, TARGETS, PROMPT, tmp_path)  # rocm and neuron in one spawn


@pytest.mark.slow
def test_neuron_buckets_trace_fullgraph_and_never_recompile(checkpoint):
    """The shape-static conv compiles in one graph per bucket (a host read or data-dependent shape would break it)."""
    assert_neuron_buckets_compile(checkpoint("lfm2")[0], PROMPT)


@pytest.mark.parametrize("target", TARGETS)
def test_one_tap_kernel_is_refused_with_the_spec_message(tmp_path, target):
    make_tiny_checkpoint(tmp_path, "Lfm2ForCausalLM", layer_types=HYBRID, conv_L_cache=1)
    with pytest.raises(ConfigError, match=r"config\.json: specs/lfm2\.yaml: conv_L_cache below 2"):
        llm(tmp_path, target)
