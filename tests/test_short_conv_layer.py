"""ShortConv (runtime/layers/short_conv, the LFM2 kind) against transformers' Lfm2ShortConv, and its state handling.

Random weights are copied into our layer through its weight_loaders; HF runs each sequence whole with no cache. Ours
runs through state-pool slots: prefill then decode, chunked prefill, interleaved sequences of one continuous batch,
a slot reused by a fresh request, padding rows, the fixed-shape speculative window, and the neuron target's
shape-static op (ops.short_conv_static) against the per-sequence reference.
"""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.layers.short_conv import ShortConv, ops
from modelgen.runtime.state_cache import PAD_SLOT, StateMetadata
from tests import state_kind_helpers as kind

transformers = pytest.importorskip("transformers")
from transformers.models.lfm2 import modeling_lfm2 as hf  # noqa: E402

HIDDEN, ATOL = 32, 1e-5


def _pair(kernel: int = 3, bias: bool = True, seed: int = 0):
    """(HF Lfm2ShortConv, our ShortConv) with the same random weights."""
    config = transformers.Lfm2Config(hidden_size=HIDDEN, conv_L_cache=kernel, conv_bias=bias, num_hidden_layers=1,
                                     layer_types=["conv"])
    torch.manual_seed(seed)
    ref = hf.Lfm2ShortConv(config, 0).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0, 0.3)
    ours = ShortConv(HIDDEN, kernel, bias, layer_name="layers.0.conv")
    kind.copy_weights(ref, ours)
    return ref, ours


@pytest.mark.parametrize("kernel, bias", [(3, False), (4, True)])
def test_prefill_then_decode_equals_full_recompute(kernel, bias):
    ref, ours = _pair(kernel, bias)
    kind.bind_pool(ours)
    x = torch.randn(12, HIDDEN)
    e = kind.err(kind.prefill_then_decode(ours, x, 7), kind.hf_output(ref, x))
    assert e < ATOL, e


def test_chunked_prefill_equals_one_shot():
    ref, ours = _pair(4)
    kind.bind_pool(ours)
    x = torch.randn(11, HIDDEN)
    assert kind.err(kind.chunked_prefill(ours, x), kind.hf_output(ref, x)) < ATOL


def test_interleaved_sequences_each_get_their_solo_output():
    """Continuous batching: A prefills, then A decodes beside B's prefill, then both decode; each equals HF alone."""
    ref, ours = _pair(3)
    kind.bind_pool(ours)
    a, b = torch.randn(9, HIDDEN), torch.randn(8, HIDDEN)
    out_a, out_b = kind.interleaved(ours, a, b)
    assert kind.err(out_a, kind.hf_output(ref, a[:8])) < ATOL
    assert kind.err(out_b, kind.hf_output(ref, b)) < ATOL


@pytest.mark.parametrize("prompt_len", [1, 5])  # a one-token prompt takes the decode-only path while fresh
def test_fresh_request_never_sees_the_previous_owner_of_its_slot(prompt_len):
    ref, ours = _pair(4)
    pool = kind.bind_pool(ours)
    kind.dirty_slot(ours, HIDDEN)  # an earlier request leaves slot 3 dirty
    assert pool.conv["layers.0.conv"][3].abs().sum() > 0
    x = torch.randn(prompt_len + 2, HIDDEN)
    assert kind.err(kind.fresh_request(ours, x, prompt_len), kind.hf_output(ref, x)) < ATOL


def test_padding_rows_touch_no_state_and_give_zeros():
    _, ours = _pair(3, bias=False)  # with biases a padding row's output is out_proj's bias
    pool = kind.bind_pool(ours)
    kind.fill_slots_0_and_1(ours, HIDDEN)
    before = pool.conv["layers.0.conv"].clone()
    y = kind.padding_rows_step(ours, HIDDEN)
    assert y[[0, 2, 3]].abs().max() == 0
    after = pool.conv["layers.0.conv"]
    assert torch.equal(after[0], before[0]) and torch.equal(after[2:], before[2:])  # slot 0: clamp target of -1
    assert not torch.equal(after[1], before[1])  # the real row advanced its own slot


def test_speculative_window_equals_decode_steps():
    """The fixed-shape window (tokens_per_seq = 3; one sequence with 2 real tokens) == one decode step per token."""
    ref, ours = _pair(3, bias=False)  # bias-free: the padding slot's output is exactly zero
    kind.bind_pool(ours)
    a, b = torch.randn(8, HIDDEN), torch.randn(7, HIDDEN)
    kind.prefill_two(ours, a, b)
    y = kind.speculative_window(ours, a, b)
    assert (y[:3] - kind.hf_output(ref, a)[5:]).abs().max().item() < ATOL
    assert (y[3:5] - kind.hf_output(ref, b)[5:]).abs().max().item() < ATOL
    assert y[5].abs().max() == 0


def test_decode_op_equals_prefill_op():
    """ops.conv_decode (one window per row) == ops.conv_prefill of one token, outputs and new states alike."""
    torch.manual_seed(1)
    D, K = 6, 4
    w, b = torch.randn(D, K), torch.randn(D)
    states, x = torch.randn(3, D, K - 1), torch.randn(3, D)
    y, new = ops.conv_decode(x, w, b, states)
    for r in range(3):
        y1, s1 = ops.conv_prefill(x[r:r + 1], w, b, states[r])
        assert torch.allclose(y[r], y1[0], atol=1e-6) and torch.equal(new[r], s1)
    assert not torch.allclose(new, states)  # the state moved on


@pytest.mark.parametrize("decode", [False, True])
def test_static_op_equals_per_sequence_reference(decode):
    """The neuron op over a padded bucket (rows 0 and 2 real, row 1 padding; padding tokens) == conv_prefill per
    sequence; the padding row's slot keeps its contents."""
    torch.manual_seed(2)
    D, K = 5, 3
    w, b = torch.randn(D, K), torch.randn(D)
    pool = torch.randn(4, D, K - 1)
    start = pool.clone()
    lens = [1, 0, 1] if decode else [4, 0, 3]
    seq_ids = [r for r, n in enumerate(lens) for _ in range(n)]
    T = 3 if decode else 9
    if decode:
        seq_ids = [0, -1, 2]
    x = torch.randn(T, D)
    seq_ids = torch.tensor(seq_ids + [-1] * (T - len(seq_ids)))
    slots, fresh = torch.tensor([2, PAD_SLOT, 0]), torch.tensor([False, False, True])
    y = ops.short_conv_static(x, w, b, pool, seq_ids, slots, fresh, decode=decode)
    for r, slot in ((0, 2), (2, 0)):
        tok = (seq_ids == r).nonzero().flatten()
        state0 = torch.zeros(D, K - 1) if fresh[r] else start[slot]
        want, new = ops.conv_prefill(x[tok], w, b, state0)
        assert torch.allclose(y[tok], want, atol=1e-6)
        assert torch.allclose(pool[slot], new)
    assert y[seq_ids < 0].abs().max() == 0
    assert torch.equal(pool[[1, 3]], start[[1, 3]])


def test_kind_answers_and_state_spec():
    _, ours = _pair(4)
    spec = ours.state_spec()
    assert ours.cache_kind == spec.kind == "recurrent_state" and ours.holds_request_state()
    assert spec.conv_shape == (HIDDEN, 3) and spec.bytes_per_slot() == HIDDEN * 3 * 4  # no recurrent part
    assert ours.step_graph_layouts(3) == {"varlen"} and ours.decode_graph_capturable()
    assert "state writes" in ours.sequence_parallel_refusal()
    with pytest.raises(ValueError, match=r"expected \[num_slots, 32, 3\]"):
        ours.bind_state(torch.zeros(2, HIDDEN, 2))
    with pytest.raises(RuntimeError, match="no state bound"):
        ShortConv(HIDDEN, 3, False)(torch.zeros(1, HIDDEN), StateMetadata.build([1], [0], [True]))
    with pytest.raises(ValueError, match="at least 2"):
        ShortConv(HIDDEN, 1, False)
