"""Gated DeltaNet ops: chunked == recurrent, split prefill == one shot, and each op == transformers' torch function."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from modelgen.runtime.layers.gated_deltanet import ops as gd

hf = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")

HK, HV, DK, DV = 2, 4, 16, 8  # grouped: each key head serves 2 value heads


def _inputs(T: int, B: int = 1, seed: int = 0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, HK, DK, generator=gen)
    k = torch.randn(B, T, HK, DK, generator=gen)
    v = torch.randn(B, T, HV, DV, generator=gen)
    a = torch.randn(B, T, HV, generator=gen)
    b = torch.randn(B, T, HV, generator=gen)
    A_log = torch.empty(HV).uniform_(0.01, 16, generator=gen).log()
    dt_bias = torch.randn(HV, generator=gen)
    g, beta = gd.gdn_gating(A_log, a, dt_bias, b)
    return q.to(dtype), k.to(dtype), v.to(dtype), g, beta.to(dtype)


def _state(B: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(B, HV, DK, DV, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("T", [1, 63, 64, 65, 130])
@pytest.mark.parametrize("with_state", [False, True])
def test_chunked_equals_recurrent(T, with_state):
    q, k, v, g, beta = _inputs(T, B=2)
    s0 = _state(2) if with_state else None
    want, want_state = gd.recurrent_gated_delta_rule(q, k, v, g, beta, s0)
    got, got_state = gd.chunk_gated_delta_rule(q, k, v, g, beta, s0, chunk_size=64)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_state, want_state, atol=1e-5, rtol=1e-5)
    assert got_state.dtype == torch.float32


@pytest.mark.parametrize("splits", [[40, 30], [1, 63, 66], [64, 1, 65], [7, 7, 7, 109]])
def test_split_prefill_carries_state(splits):
    T = sum(splits)
    q, k, v, g, beta = _inputs(T, seed=3)
    s0 = _state(1, seed=4)
    want, want_state = gd.chunk_gated_delta_rule(q, k, v, g, beta, s0)
    outs, state, s = [], s0, 0
    for n in splits:
        out, state = gd.chunk_gated_delta_rule(q[:, s:s + n], k[:, s:s + n], v[:, s:s + n], g[:, s:s + n],
                                               beta[:, s:s + n], state)
        outs.append(out)
        s += n
    torch.testing.assert_close(torch.cat(outs, 1), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state, want_state, atol=1e-5, rtol=1e-5)


def test_varlen_equals_each_alone():
    lens = [5, 70, 1, 64]
    T = sum(lens)
    q, k, v, g, beta = _inputs(T, seed=5)
    s0 = _state(len(lens), seed=6)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()])
    got, got_state = gd.chunk_gated_delta_rule(q, k, v, g, beta, s0, cu_seqlens=cu)
    for i in range(len(lens)):
        s, e = cu[i].item(), cu[i + 1].item()
        want, want_state = gd.recurrent_gated_delta_rule(q[:, s:e], k[:, s:e], v[:, s:e], g[:, s:e], beta[:, s:e],
                                                         s0[i:i + 1])
        torch.testing.assert_close(got[:, s:e], want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got_state[i:i + 1], want_state, atol=1e-5, rtol=1e-5)


def test_padding_tokens_leave_state_unchanged():
    """g = beta = k = 0 is an exact identity on the state (what the static-shape path relies on)."""
    q, k, v, g, beta = _inputs(10, seed=7)
    s0 = _state(1)
    zero = lambda x: torch.cat([x, torch.zeros_like(x[:, :6])], 1)  # noqa: E731
    _, want = gd.chunk_gated_delta_rule(q, k, v, g, beta, s0)
    _, got = gd.chunk_gated_delta_rule(zero(q), zero(k), torch.cat([v, torch.randn_like(v[:, :6])], 1), zero(g),
                                       zero(beta), s0)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("T", [1, 65, 130])
def test_chunk_matches_transformers(T):
    q, k, v, g, beta = _inputs(T, B=2, seed=8)
    s0 = _state(2, seed=9)
    want, want_state = hf.torch_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64, initial_state=s0,
                                                       output_final_state=True, use_qk_l2norm_in_kernel=True)
    got, got_state = gd.chunk_gated_delta_rule(q, k, v, g, beta, s0)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_state, want_state, atol=1e-5, rtol=1e-5)


def test_recurrent_matches_transformers():
    q, k, v, g, beta = _inputs(9, B=3, seed=10)
    s0 = _state(3)
    want, want_state = hf.torch_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                                           use_qk_l2norm_in_kernel=True)
    got, got_state = gd.recurrent_gated_delta_rule(q, k, v, g, beta, s0)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(got_state, want_state, atol=1e-6, rtol=1e-6)


def test_bf16_inputs_run_in_float32():
    q, k, v, g, beta = _inputs(70, seed=11, dtype=torch.bfloat16)
    want, want_state = hf.torch_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64, output_final_state=True,
                                                       use_qk_l2norm_in_kernel=True)
    got, got_state = gd.chunk_gated_delta_rule(q, k, v, g, beta)
    assert got.dtype == torch.bfloat16 and got_state.dtype == torch.float32
    torch.testing.assert_close(got, want)  # bf16 tolerance: same fp32 algorithm, one rounding of the output
    torch.testing.assert_close(got_state, want_state, atol=1e-5, rtol=1e-5)


def test_substitution_solver_equals_triangular():
    gen = torch.Generator().manual_seed(12)
    a = torch.randn(3, 16, 16, generator=gen) * 0.3
    rhs = torch.randn(3, 16, 5, generator=gen)
    torch.testing.assert_close(gd.solve_unit_lower(a, rhs, "substitution"), gd.solve_unit_lower(a, rhs), atol=1e-5,
                               rtol=1e-5)


def test_gating_matches_transformers_expressions():
    gen = torch.Generator().manual_seed(13)
    A_log = torch.randn(HV, generator=gen).to(torch.bfloat16)
    dt_bias = torch.randn(HV, generator=gen).to(torch.bfloat16)
    a = torch.randn(5, HV, generator=gen).to(torch.bfloat16)
    b = torch.randn(5, HV, generator=gen).to(torch.bfloat16)
    g, beta = gd.gdn_gating(A_log, a, dt_bias, b)
    assert g.dtype == torch.float32 and beta.dtype == torch.bfloat16
    assert torch.equal(g, -A_log.float().exp() * F.softplus(a.float() + dt_bias))
    assert torch.equal(beta, b.sigmoid())
    assert (g <= 0).all()


def test_conv_prefill_matches_transformers():
    C, K, T = 12, 4, 9
    gen = torch.Generator().manual_seed(14)
    x = torch.randn(T, C, generator=gen)
    w = torch.randn(C, K, generator=gen)
    want = hf.causal_conv1d_fn(x.T[None], w, None, activation="silu")[0].T
    got, state = gd.causal_conv1d_prefill(x, w)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(state, x[-(K - 1):].T)


def test_conv_update_and_split_match_transformers():
    """Continuing from a state (decode and chunked prefill) == HF's causal_conv1d_update == one shot."""
    C, K, T = 12, 4, 11
    gen = torch.Generator().manual_seed(15)
    x = torch.randn(T, C, generator=gen)
    w = torch.randn(C, K, generator=gen)
    whole, whole_state = gd.causal_conv1d_prefill(x, w)
    # split 2 + 5 (shorter than K-1 first, so the state mixes zeros and inputs) + token-by-token decode
    o1, s = gd.causal_conv1d_prefill(x[:2], w)
    o2, s = gd.causal_conv1d_prefill(x[2:7], w, s)
    outs = [o1, o2]
    hf_state = torch.cat([torch.zeros(1, C, 1), s[None]], -1)  # HF keeps K entries; the oldest is never read
    for t in range(7, T):
        o, s_next = gd.causal_conv1d_update(x[t:t + 1], w, s[None])
        want = hf.causal_conv1d_update(x[t:t + 1].T[None], hf_state, w, None, "silu")[0].T
        torch.testing.assert_close(o, want, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(s_next[0], hf_state[0, :, 1:])
        outs.append(o)
        s = s_next[0]
    torch.testing.assert_close(torch.cat(outs), whole, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(s, whole_state)


def test_conv_lengths_keep_padding_out_of_state():
    C, K = 6, 4
    gen = torch.Generator().manual_seed(16)
    x = torch.randn(3, 5, C, generator=gen)
    w = torch.randn(C, K, generator=gen)
    s0 = torch.randn(3, C, K - 1, generator=gen)
    lengths = torch.tensor([5, 2, 0])
    _, got = gd.causal_conv1d(x, w, s0, lengths)
    for i, n in enumerate(lengths.tolist()):
        _, want = gd.causal_conv1d(x[i:i + 1, :n], w, s0[i:i + 1])
        torch.testing.assert_close(got[i], want[0])
    torch.testing.assert_close(got[2], s0[2])  # zero valid tokens: state untouched


def test_gated_norm_matches_transformers():
    gen = torch.Generator().manual_seed(17)
    for dtype in (torch.float32, torch.bfloat16):
        norm = hf.Qwen3NextRMSNormGated(DV, eps=1e-6)
        with torch.no_grad():
            norm.weight.copy_(torch.randn(DV, generator=gen))
        norm = norm.to(dtype)
        x = torch.randn(7, DV, generator=gen).to(dtype)
        z = torch.randn(7, DV, generator=gen).to(dtype)
        assert torch.equal(gd.gated_rms_norm(x, z, norm.weight, 1e-6), norm(x, z))


def test_errors_name_the_problem():
    q, k, v, g, beta = _inputs(4)
    with pytest.raises(ValueError, match="initial_state has shape"):
        gd.chunk_gated_delta_rule(q, k, v, g, beta, torch.zeros(1, HV, DK, DK + 1))
    with pytest.raises(ValueError, match="not a multiple of num_k_heads"):
        gd.expand_kv_heads(torch.zeros(1, 3, 4), 4)
