"""Mamba2 (runtime/layers/mamba2, the mamba2 kind) against transformers' Mamba2Mixer, and its state handling.

Random weights are copied into our layer through its weight_loaders; HF runs each sequence whole with no cache (its
chunked scan). Ours runs through state-pool slots: prefill then decode, chunked prefill, interleaved sequences of one
continuous batch, a slot reused by a fresh request, padding rows, the fixed-shape speculative window, and the neuron
target's shape-static op (ops.mamba2_static) against the per-sequence path.
"""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.layers.mamba2 import Mamba2, ops
from modelgen.runtime.state_cache import PAD_SLOT, StateMetadata
from tests import state_kind_helpers as kind

transformers = pytest.importorskip("transformers")
from transformers.models.mamba2 import modeling_mamba2 as hf  # noqa: E402

HIDDEN, ATOL = 32, 2e-5
BASE = dict(hidden_size=HIDDEN, num_heads=8, head_dim=8, state_size=4, n_groups=2, expand=2, conv_kernel=4,
            chunk_size=4, use_bias=True, use_conv_bias=True, num_hidden_layers=1, layer_norm_epsilon=1e-5)


def _pair(seed: int = 0, **over):
    """(HF Mamba2Mixer, our Mamba2) with the same random weights."""
    config = transformers.Mamba2Config(**{**BASE, **over})
    torch.manual_seed(seed)
    ref = hf.Mamba2Mixer(config, 0).eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.normal_(0, 0.3)
        ref.A_log.uniform_(-1.0, 1.0)  # decays exp(dt * -exp(A_log)) spread over (0, 1)
        ref.dt_bias.uniform_(-2.0, 0.5)
    ours = Mamba2(config.hidden_size, config.num_heads, config.head_dim, config.state_size, config.n_groups,
                  config.conv_kernel, config.chunk_size, tuple(config.time_step_limit), config.use_bias,
                  config.use_conv_bias, config.hidden_act, config.layer_norm_epsilon, layer_name="layers.0.mixer")
    kind.copy_weights(ref, ours)
    return ref, ours


@pytest.mark.parametrize("over", [{}, dict(n_groups=1, use_bias=False, use_conv_bias=False, conv_kernel=3),
                                  dict(time_step_limit=(0.05, 0.6), chunk_size=3)])
def test_prefill_then_decode_equals_full_recompute(over):
    """Prefill (chunked scan over 3 chunks) then decode steps == HF's whole-sequence forward. The time_step_limit
    case clamps dt on both paths (transformers clamps in its scan; the step here clamps the same way)."""
    ref, ours = _pair(**over)
    kind.bind_pool(ours)
    x = torch.randn(14, HIDDEN)
    want = kind.hf_output(ref, x)
    if "time_step_limit" in over:  # HF's own decode step does not clamp dt; the whole-sequence reference only
        assert kind.err(kind.prefill_then_decode(ours, x[:9], 9), want[:9]) < ATOL  # covers the prefill
        return
    got = kind.prefill_then_decode(ours, x, 9)
    assert kind.err(got[:1], want[:9]) < ATOL
    assert kind.err(got, want) < ATOL


def test_time_step_limit_is_applied():
    """Negative control: the same weights without the limit give other outputs."""
    ref, ours = _pair(time_step_limit=(0.05, 0.6))
    kind.bind_pool(ours)
    x = torch.randn(8, HIDDEN)
    _, plain = _pair()
    kind.bind_pool(plain)
    assert kind.err(kind.step(ours, [(x, 0, True)]), kind.hf_output(ref, x)) < ATOL
    assert kind.err(kind.step(plain, [(x, 0, True)]), kind.hf_output(ref, x)) > 1e-3


def test_chunked_scan_equals_recurrent_steps():
    """ops.ssd_chunked over a padded batch == ops.ssd_step position after position (outputs and final states),
    for chunk sizes that do and do not divide the length; padding positions (dt = 0, x = 0) leave the state alone."""
    torch.manual_seed(3)
    R, T, H, P, G, N = 2, 7, 4, 3, 2, 5
    x, dt = torch.randn(R, T, H, P), torch.rand(R, T, H)
    B, C, A = torch.randn(R, T, G, N), torch.randn(R, T, G, N), -torch.rand(H) * 2
    dt[1, 5:], x[1, 5:] = 0, 0  # row 1: 5 real positions
    S0 = torch.randn(R, H, P, N)
    S, ys = S0.clone(), []
    for t in range(T):
        y, S = ops.ssd_step(x[:, t], dt[:, t], A, B[:, t], C[:, t], S)
        ys.append(y)
    want = torch.stack(ys, 1)
    for chunk in (1, 3, 7, 16):
        y, final = ops.ssd_chunked(x, dt, A, B, C, S0, chunk)
        assert torch.allclose(y, want, atol=1e-5) and torch.allclose(final, S, atol=1e-5), chunk
    _, S5 = ops.ssd_chunked(x[1:, :5], dt[1:, :5], A, B[1:, :5], C[1:, :5], S0[1:], 3)
    assert torch.allclose(S5, S[1:], atol=1e-5)


def test_chunked_prefill_equals_one_shot():
    ref, ours = _pair()
    kind.bind_pool(ours)
    x = torch.randn(13, HIDDEN)
    assert kind.err(kind.chunked_prefill(ours, x), kind.hf_output(ref, x)) < ATOL


def test_interleaved_sequences_each_get_their_solo_output():
    """Continuous batching: A prefills, then A decodes beside B's prefill, then both decode; each equals HF alone."""
    ref, ours = _pair()
    kind.bind_pool(ours)
    a, b = torch.randn(9, HIDDEN), torch.randn(8, HIDDEN)
    out_a, out_b = kind.interleaved(ours, a, b)
    assert kind.err(out_a, kind.hf_output(ref, a[:8])) < ATOL
    assert kind.err(out_b, kind.hf_output(ref, b)) < ATOL


@pytest.mark.parametrize("prompt_len", [1, 5])  # a one-token prompt takes the decode-only path while fresh
def test_fresh_request_never_sees_the_previous_owner_of_its_slot(prompt_len):
    ref, ours = _pair()
    pool = kind.bind_pool(ours)
    kind.dirty_slot(ours, HIDDEN)  # an earlier request leaves slot 3 dirty
    assert pool.conv["layers.0.mixer"][3].abs().sum() > 0 and pool.recurrent["layers.0.mixer"][3].abs().sum() > 0
    x = torch.randn(prompt_len + 2, HIDDEN)
    assert kind.err(kind.fresh_request(ours, x, prompt_len), kind.hf_output(ref, x)) < ATOL


def test_padding_rows_touch_no_state_and_give_zeros():
    _, ours = _pair(use_bias=False)  # with biases a padding row's output is out_proj's bias
    pool = kind.bind_pool(ours)
    kind.fill_slots_0_and_1(ours, HIDDEN)
    before = [t.clone() for t in pool.tensors()["layers.0.mixer"]]
    y = kind.padding_rows_step(ours, HIDDEN)
    assert y[[0, 2, 3]].abs().max() == 0
    for after, old in zip(pool.tensors()["layers.0.mixer"], before):
        assert torch.equal(after[0], old[0]) and torch.equal(after[2:], old[2:])  # slot 0: clamp target of -1
        assert not torch.equal(after[1], old[1])  # the real row advanced its own slot


def test_speculative_window_equals_decode_steps():
    """The fixed-shape window (tokens_per_seq = 3; one sequence with 2 real tokens) == one decode step per token,
    and a snapshot / restore of the pool rolls the window back (speculative rejection)."""
    ref, ours = _pair(use_bias=False)  # bias-free: the padding slot's output is exactly zero
    pool = kind.bind_pool(ours)
    a, b = torch.randn(8, HIDDEN), torch.randn(7, HIDDEN)
    kind.prefill_two(ours, a, b)
    snap = pool.snapshot([0, 1])
    y = kind.speculative_window(ours, a, b)
    assert (y[:3] - kind.hf_output(ref, a)[5:]).abs().max().item() < ATOL
    assert (y[3:5] - kind.hf_output(ref, b)[5:]).abs().max().item() < ATOL
    assert y[5].abs().max() == 0
    pool.restore([0, 1], snap)  # all drafts rejected: the next decode continues from position 5 again
    assert kind.err(kind.step(ours, [(a[5:6], 0, False)]), kind.hf_output(ref, a)[5:6]) < ATOL


@pytest.mark.parametrize("decode", [False, True])
def test_static_op_equals_per_sequence_path(decode):
    """The neuron op over a padded bucket (rows 0 and 2 real, row 1 padding; padding tokens) == mamba2_rows per
    sequence; the padding row's slot and the unused slots keep their contents."""
    _, ours = _pair(1)
    p = ours.params()
    torch.manual_seed(2)
    C, K = ours.conv_dim, ours.conv_kernel
    conv_pool, ssm_pool = torch.randn(4, C, K - 1), torch.randn(4, ours.num_heads, ours.head_dim, ours.state_size)
    start = conv_pool.clone(), ssm_pool.clone()
    lens = [1, 0, 1] if decode else [6, 0, 3]
    seq_ids = [0, -1, 2] if decode else [r for r, n in enumerate(lens) for _ in range(n)]
    T = 3 if decode else 12
    proj = ours.in_proj.weight.shape[0]
    x = torch.randn(T, proj)
    seq_ids = torch.tensor(seq_ids + [-1] * (T - len(seq_ids)))
    slots, fresh = torch.tensor([2, PAD_SLOT, 0]), torch.tensor([False, False, True])
    with torch.no_grad():
        y = ops.mamba2_static(x, p, conv_pool, ssm_pool, seq_ids, slots, fresh, decode=decode)
        for r, slot in ((0, 2), (2, 0)):
            tok = (seq_ids == r).nonzero().flatten()
            s0 = [torch.zeros_like(t[slot]) if fresh[r] else t[slot] for t in start]
            want, c1, s1 = ops.mamba2_rows(x[tok].unsqueeze(0), torch.tensor([len(tok)]), s0[0][None], s0[1][None],
                                           p, decode=decode)
            assert torch.allclose(y[tok], want[0], atol=1e-5)
            assert torch.allclose(conv_pool[slot], c1[0]) and torch.allclose(ssm_pool[slot], s1[0], atol=1e-6)
    assert y[seq_ids < 0].abs().max() == 0
    assert torch.equal(conv_pool[[1, 3]], start[0][[1, 3]]) and torch.equal(ssm_pool[[1, 3]], start[1][[1, 3]])


def test_kind_answers_and_state_spec():
    _, ours = _pair()
    spec = ours.state_spec()
    assert ours.cache_kind == spec.kind == "recurrent_state" and ours.holds_request_state()
    conv_dim = 64 + 2 * 2 * 4
    assert spec.conv_shape == (conv_dim, 3) and spec.recurrent_shape == (8, 8, 4)
    assert spec.bytes_per_slot() == (conv_dim * 3 + 8 * 8 * 4) * 4
    assert ours.step_graph_layouts(3) == {"varlen"} and ours.decode_graph_capturable()
    assert "state writes" in ours.sequence_parallel_refusal()
    with pytest.raises(ValueError, match=r"conv_state has shape"):
        ours.bind_state(torch.zeros(2, conv_dim, 2), torch.zeros(2, 8, 8, 4))
    with pytest.raises(RuntimeError, match="no state bound"):
        Mamba2(HIDDEN, 8, 8, 4, 2, 4, 4)(torch.zeros(1, HIDDEN), StateMetadata.build([1], [0], [True]))
    with pytest.raises(ValueError, match="multiple of n_groups"):
        Mamba2(HIDDEN, 8, 8, 4, 3, 4, 4)
