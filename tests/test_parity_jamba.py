"""Jamba (specs/jamba.yaml: the mamba kind, NoPE GQA, Jamba's MoE) vs transformers' JambaForCausalLM on tiny random
checkpoints.

Cases cover what JambaConfig can switch: the attention and expert schedules (periods and offsets, every combination
of mixer and feed-forward), one expert (every layer a dense MLP) or many (softmax top-2, unnormalised), Mamba conv
and projection biases on and off, other conv kernels / state sizes / dt ranks / expansions, tied and untied
embeddings, per-expert and fused expert checkpoints (``use_mamba_kernels`` is deprecated and changes nothing).
Gates as for the other families: fp32 prefill logits within 1e-4 and 16 greedy tokens equal to transformers'
(teacher-forced full forwards), on rocm and neuron. Negative controls: the conv history, the dt/B/C RMSNorms and the
router's unnormalised weights each move the logits when switched off, so none of them is a no-op on these fixtures.
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
    checkpoint_cache,
    hf_greedy_forward,
    hf_logits,
    llm,
)

TARGETS = ["rocm", "neuron"]
PREFILL_ATOL = 1e-4
PROMPT = tiny_prompt()
SCALE = dict(initializer_range=0.1)  # logits of order 1, so every layer's contribution shows

CASES: dict[str, dict] = {
    # mamba+MLP, attention+MoE, mamba+MLP, mamba+MoE; conv bias (JambaConfig's default), no projection biases
    "jamba": dict(attn_layer_period=3, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1),
    # attention+MLP, mamba+MLP, attention+MoE, mamba+MLP, attention+MLP; projection biases, no conv bias, kernel 3,
    # d_state 8, dt rank 6 (not ceil(hidden / 16)), expand 1, tied embeddings
    "jamba_biases_tied": dict(num_hidden_layers=5, attn_layer_period=2, attn_layer_offset=0, expert_layer_period=3,
                              expert_layer_offset=2, mamba_proj_bias=True, mamba_conv_bias=False, mamba_d_conv=3,
                              mamba_d_state=8, mamba_dt_rank=6, mamba_expand=1, tie_word_embeddings=True),
    # one expert: every feed-forward a JambaMLP; attention last
    "jamba_one_expert": dict(num_experts=1, attn_layer_period=4, attn_layer_offset=3, use_mamba_kernels=False),
}
FUSED = ["jamba"]  # also saved with transformers v5's fused expert tensors


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return checkpoint_cache(tmp_path_factory, lambda d, name, fused: make_tiny_checkpoint(
        d, "JambaForCausalLM", fused_experts=fused, **SCALE, **CASES[name]))


def _logits_error(model, hf) -> float:
    return (model.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, fused", [(n, False) for n in CASES] + [(n, True) for n in FUSED])
def test_against_hf_jamba_fp32(checkpoint, name, fused, target):
    path, hf = checkpoint(name, fused)
    model = llm(path, target, strict_config=True)  # every config.json key read or declared irrelevant
    err = _logits_error(model, hf)
    assert err < PREFILL_ATOL, f"{name}/{target}: prefill logits differ by {err}"
    out = model.generate_ids([PROMPT], SamplingParams(max_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy_forward(hf, PROMPT, 16), f"{name}/{target}: greedy tokens differ"


def test_layer_schedule_follows_jambaconfig(checkpoint):
    """Each layer's mixer and feed-forward are the kinds JambaConfig.layers_block_type / layers_num_experts say."""
    for name in CASES:
        path, hf = checkpoint(name)
        layers = llm(path, "rocm").model.model.layers
        kinds = [("attention" if hasattr(layer, "self_attn") else "mamba",
                  hasattr(layer.feed_forward, "router")) for layer in layers]
        want = [(b, n > 1) for b, n in zip(hf.config.layers_block_type, hf.config.layers_num_experts)]
        assert kinds == want, name
    assert {k for name in CASES for k in hf_kinds(checkpoint(name)[1])} == {
        ("attention", False), ("attention", True), ("mamba", False), ("mamba", True)}  # every combination


def hf_kinds(hf) -> set[tuple[str, bool]]:
    return {(b, n > 1) for b, n in zip(hf.config.layers_block_type, hf.config.layers_num_experts)}


# ------------------------------------------------------------------------------------------ negative controls
def _mambas(model):
    return [layer.mamba for layer in model.model.model.layers if hasattr(layer, "mamba")]


def test_conv_history_matters(checkpoint):
    """Zeroing every conv tap but the current token's moves the logits far past the tolerance."""
    path, hf = checkpoint("jamba")
    model = llm(path, "rocm")
    assert _logits_error(model, hf) < PREFILL_ATOL
    with torch.no_grad():
        for mamba in _mambas(model):
            mamba.conv1d.weight[..., :-1].zero_()
    assert _logits_error(model, hf) > 1e-2


def test_dt_b_c_norms_matter(checkpoint):
    """JambaMambaMixer's RMSNorms on dt, B and C: a mixer without them (MambaMixer's) gives other logits."""
    path, hf = checkpoint("jamba")
    model = llm(path, "rocm")
    for mamba in _mambas(model):
        mamba.use_rms_norm = False
    assert _logits_error(model, hf) > 1e-2


def test_unnormalised_router_weights_matter(checkpoint):
    """JambaTopKRouter leaves the top-2 softmax weights unnormalised: renormalising them moves the logits."""
    path, hf = checkpoint("jamba")
    model = llm(path, "rocm")
    routers = [layer.feed_forward.router for layer in model.model.model.layers if hasattr(layer.feed_forward, "router")]
    assert routers
    for router in routers:
        router.renormalize = True
    assert _logits_error(model, hf) > 1e-2


# ------------------------------------------------------------------------------- per-request state in the engine
@pytest.mark.parametrize("target", TARGETS)
def test_interleaved_requests_each_get_their_solo_tokens(checkpoint, target):
    """Different lengths in one continuous batch (short ones decode beside longer prefills): no state leaks."""
    path, _ = checkpoint("jamba_biases_tied")
    prompts = [PROMPT, PROMPT[:5], PROMPT[7:20], [3]]
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    together = llm(path, target, max_num_seqs=4).generate_ids(prompts, params)
    alone = [llm(path, target).generate_ids([p], params)[0] for p in prompts]
    assert together == alone


def test_preempted_and_reused_slots_start_fresh(checkpoint):
    """A KV cache too small for both requests forces preemption; the victim restarts from zeroed conv and SSM
    states, and later requests reuse slots that earlier ones left dirty."""
    path, _ = checkpoint("jamba")
    prompts = [PROMPT, PROMPT[4:], PROMPT[:9]]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    want = [llm(path, "rocm").generate_ids([p], params)[0] for p in prompts]
    tight = llm(path, "rocm", block_size=8, num_blocks=7, max_num_seqs=2)
    assert tight.generate_ids(prompts, params) == want
    assert tight.stats.preemptions > 0
    assert tight.state_pool.num_free == tight.state_pool.num_slots  # every slot returned


@pytest.mark.parametrize("target", TARGETS)
def test_chunked_prefill_equals_one_shot(checkpoint, target):
    path, _ = checkpoint("jamba")
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    want = llm(path, target).generate_ids([PROMPT], params)[0]
    extra = {"prefill_buckets": [8, 256]} if target == "neuron" else {}
    assert llm(path, target, max_num_batched_tokens=8, **extra).generate_ids([PROMPT], params)[0] == want


def test_decode_steps_equal_prefill_of_the_same_tokens(checkpoint):
    """Logits of each decode step (the recurrent step) == the teacher-forced prefill (the chunked scan) over the
    same tokens."""
    path, _ = checkpoint("jamba")
    model = llm(path, "rocm")
    out = model.generate_ids([PROMPT], SamplingParams(max_tokens=8, ignore_eos=True))[0]
    assert model.score(PROMPT + out)[len(PROMPT) - 1:-1].argmax(-1).tolist() == out


# ------------------------------------------------------------------------------------ parallelism and compilation
@pytest.mark.slow
def test_tensor_parallel_2_equals_1(checkpoint, tmp_path):
    """Two gloo ranks split the Mamba channels (in_proj's x and z halves, conv1d, dt_proj, A_log, D, out_proj;
    x_proj row-parallel), the attention heads and the experts: same logits, same tokens."""
    path, _ = checkpoint("jamba_biases_tied")  # biases too: in_proj's bias is split like its weight
    assert_tp2_matches_tp1_on(path, TARGETS, PROMPT, tmp_path)  # rocm and neuron in one spawn


@pytest.mark.slow
def test_neuron_buckets_trace_fullgraph_and_never_recompile(checkpoint):
    """The shape-static conv and scan compile in one graph per bucket (a host read or data-dependent shape would
    break it)."""
    assert_neuron_buckets_compile(checkpoint("jamba")[0], PROMPT)


# ---------------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("overrides, message", [
    (dict(mamba_d_conv=1), r"mamba_d_conv below 2"),
    (dict(hidden_act="gelu"), r"hidden_act other than silu"),
])
def test_refused_configs_name_the_spec_rule(tmp_path, target, overrides, message):
    make_tiny_checkpoint(tmp_path, "JambaForCausalLM", **overrides)
    with pytest.raises(ConfigError, match=rf"config\.json: specs/jamba\.yaml: {message}"):
        llm(tmp_path, target)
