"""LightningAttention (runtime/layers/lightning_attention, the MiniMax kind) against transformers'
MiniMaxLightningAttention, and its state handling.

Random weights are copied into our layer through its weight_loaders; HF runs each sequence whole with no cache (its
blockwise path). Ours runs through state-pool slots: prefill then decode, chunked prefill, interleaved sequences of
one continuous batch, a slot reused by a fresh request, padding rows, the fixed-shape speculative window, and the
neuron target's shape-static op (ops.lightning_static) against the per-sequence reference.
"""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.layers.lightning_attention import LightningAttention, ops
from modelgen.runtime.state_cache import NO_STATE, PAD_SLOT, StateMetadata
from tests import state_kind_helpers as kind

transformers = pytest.importorskip("transformers")
from transformers.models.minimax import modeling_minimax as hf  # noqa: E402

HIDDEN, HEADS, HEAD_DIM, BLOCK, LAYERS, ATOL = 32, 4, 8, 4, 3, 1e-5


def _pair(layer_idx: int = 1, seed: int = 0):
    """(HF MiniMaxLightningAttention, our LightningAttention) with the same random weights; blocks of 4 tokens, so
    the prompts below span several blocks and end inside one."""
    config = transformers.MiniMaxConfig(hidden_size=HIDDEN, num_attention_heads=HEADS, head_dim=HEAD_DIM,
                                        num_hidden_layers=LAYERS, block_size=BLOCK)
    torch.manual_seed(seed)
    ref = hf.MiniMaxLightningAttention(config, layer_idx).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0, 0.3)
    ours = LightningAttention(HIDDEN, HEADS, HEAD_DIM, BLOCK, layer_idx, LAYERS, 1e-6, layer_name="layers.1.attn")
    kind.copy_weights(ref, ours, rename=lambda name: name.replace("qkv.", "qkv_proj."))
    return ref, ours


def _hf(ref, x: torch.Tensor) -> torch.Tensor:
    return kind.hf_output(ref, x, None, None)  # no position embeddings (lightning attention has none), no mask


@pytest.mark.parametrize("layer_idx", [0, 2])  # the fastest and the slowest decay of the depth schedule
def test_prefill_then_decode_equals_full_recompute(layer_idx):
    ref, ours = _pair(layer_idx)
    kind.bind_pool(ours)
    x = torch.randn(13, HIDDEN)
    want = _hf(ref, x)
    assert kind.err(kind.prefill_then_decode(ours, x, 7), want) < ATOL


def test_prefill_equals_decode_steps():
    """ops.lightning_prefill (blockwise) == ops.lightning_decode token by token, outputs and final state."""
    torch.manual_seed(1)
    q, k, v = (torch.randn(11, HEADS, HEAD_DIM) for _ in range(3))
    state, slope = torch.randn(HEADS, HEAD_DIM, HEAD_DIM), ops.slope_rate(HEADS, 0, LAYERS)
    out, new = ops.lightning_prefill(q, k, v, state, slope, BLOCK)
    s, steps = state[None], []
    for t in range(11):
        o, s = ops.lightning_decode(q[t:t + 1], k[t:t + 1], v[t:t + 1], s, slope)
        steps.append(o)
    assert torch.allclose(out, torch.cat(steps), atol=1e-5) and torch.allclose(new, s[0], atol=1e-5)
    assert not torch.allclose(new, state)  # the state moved on


def test_chunked_prefill_equals_one_shot():
    ref, ours = _pair()
    kind.bind_pool(ours)
    x = torch.randn(11, HIDDEN)
    assert kind.err(kind.chunked_prefill(ours, x), _hf(ref, x)) < ATOL


def test_interleaved_sequences_each_get_their_solo_output():
    """Continuous batching: A prefills, then A decodes beside B's prefill, then both decode; each equals HF alone."""
    ref, ours = _pair()
    kind.bind_pool(ours)
    a, b = torch.randn(9, HIDDEN), torch.randn(8, HIDDEN)
    out_a, out_b = kind.interleaved(ours, a, b)
    assert kind.err(out_a, _hf(ref, a[:8])) < ATOL
    assert kind.err(out_b, _hf(ref, b)) < ATOL


@pytest.mark.parametrize("prompt_len", [1, 5])  # a one-token prompt takes the decode-only path while fresh
def test_fresh_request_never_sees_the_previous_owner_of_its_slot(prompt_len):
    ref, ours = _pair()
    pool = kind.bind_pool(ours)
    kind.dirty_slot(ours, HIDDEN)  # an earlier request leaves slot 3 dirty
    assert pool.recurrent["layers.1.attn"][3].abs().sum() > 0
    x = torch.randn(prompt_len + 2, HIDDEN)
    assert kind.err(kind.fresh_request(ours, x, prompt_len), _hf(ref, x)) < ATOL


def test_padding_rows_touch_no_state_and_give_zeros():
    _, ours = _pair()
    pool = kind.bind_pool(ours)
    kind.fill_slots_0_and_1(ours, HIDDEN)
    before = pool.recurrent["layers.1.attn"].clone()
    y = kind.padding_rows_step(ours, HIDDEN)
    assert y[[0, 2, 3]].abs().max() == 0
    after = pool.recurrent["layers.1.attn"]
    assert torch.equal(after[0], before[0]) and torch.equal(after[2:], before[2:])  # slot 0: clamp target of -1
    assert not torch.equal(after[1], before[1])  # the real row advanced its own slot


def test_speculative_window_equals_decode_steps():
    """The fixed-shape window (tokens_per_seq = 3; one sequence with 2 real tokens) == one decode step per token."""
    ref, ours = _pair()
    kind.bind_pool(ours)
    a, b = torch.randn(8, HIDDEN), torch.randn(7, HIDDEN)
    kind.prefill_two(ours, a, b)
    y = kind.speculative_window(ours, a, b)
    assert (y[:3] - _hf(ref, a)[5:]).abs().max().item() < ATOL
    assert (y[3:5] - _hf(ref, b)[5:]).abs().max().item() < ATOL
    assert y[5].abs().max() == 0


@pytest.mark.parametrize("decode", [False, True])
def test_static_op_equals_per_sequence_reference(decode):
    """The neuron op over a padded bucket (rows 0 and 2 real, row 1 padding; padding tokens) == lightning_prefill per
    sequence; the padding row's slot keeps its contents."""
    torch.manual_seed(2)
    slope = ops.slope_rate(HEADS, 1, LAYERS)
    pool = torch.randn(4, HEADS, HEAD_DIM, HEAD_DIM)
    start = pool.clone()
    if decode:
        T, seq_ids = 3, [0, -1, 2]
    else:
        T, lens = 12, [6, 0, 3]  # row 0 spans two blocks of 4
        seq_ids = [r for r, n in enumerate(lens) for _ in range(n)]
    q, k, v = (torch.randn(T, HEADS, HEAD_DIM) for _ in range(3))
    seq_ids = torch.tensor(seq_ids + [-1] * (T - len(seq_ids)))
    slots, fresh = torch.tensor([2, PAD_SLOT, 0]), torch.tensor([False, False, True])
    y = ops.lightning_static(q, k, v, slope, pool, seq_ids, slots, fresh, BLOCK, decode=decode)
    for r, slot in ((0, 2), (2, 0)):
        tok = (seq_ids == r).nonzero().flatten()
        state0 = torch.zeros(HEADS, HEAD_DIM, HEAD_DIM) if fresh[r] else start[slot]
        want, new = ops.lightning_prefill(q[tok], k[tok], v[tok], state0, slope, BLOCK)
        assert torch.allclose(y[tok], want, atol=1e-5)
        assert torch.allclose(pool[slot], new, atol=1e-5)
    assert y[seq_ids < 0].abs().max() == 0
    assert torch.equal(pool[[1, 3]], start[[1, 3]])


def test_slopes_follow_transformers_schedule():
    """Bit for bit HF's slope_rate (layer 0, a middle and the last layer; a head count that is not a power of two)."""
    for heads, layers in ((4, 3), (6, 5)):
        config = transformers.MiniMaxConfig(hidden_size=heads * 8, num_attention_heads=heads, head_dim=8,
                                            num_hidden_layers=layers)
        for i in (0, layers // 2, layers - 1):
            want = hf.MiniMaxLightningAttention(config, i).slope_rate.flatten()
            assert torch.equal(ops.slope_rate(heads, i, layers), want)
    assert not torch.equal(ops.slope_rate(4, 0, 3), ops.slope_rate(4, 1, 3))


def test_kind_answers_and_state_spec():
    _, ours = _pair()
    spec = ours.state_spec()
    assert ours.cache_kind == spec.kind == "recurrent_state" and ours.holds_request_state()
    assert spec.recurrent_shape == (HEADS, HEAD_DIM, HEAD_DIM) and spec.conv_shape == NO_STATE
    assert spec.bytes_per_slot() == HEADS * HEAD_DIM * HEAD_DIM * 4  # float32, no conv part
    assert ours.step_graph_layouts(3) == {"varlen"} and ours.decode_graph_capturable()
    assert "state writes" in ours.sequence_parallel_refusal()
    with pytest.raises(ValueError, match=r"expected \[num_slots, 4, 8, 8\]"):
        ours.bind_state(torch.zeros(2, 0, 0), torch.zeros(2, HEADS, HEAD_DIM, 4))
    with pytest.raises(RuntimeError, match="no state bound"):
        LightningAttention(HIDDEN, HEADS, HEAD_DIM, BLOCK, 0, 2, 1e-6)(
            torch.zeros(1, HIDDEN), StateMetadata.build([1], [0], [True]))
    with pytest.raises(ValueError, match="block_size must be positive"):
        LightningAttention(HIDDEN, HEADS, HEAD_DIM, 0, 0, 2, 1e-6)
