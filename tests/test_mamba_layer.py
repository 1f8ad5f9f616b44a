"""MambaMixer (runtime/layers/mamba, the Mamba-1 kind) against transformers' JambaMambaMixer / MambaMixer, and its
state handling.

Random weights are copied into our layer through its weight_loaders; HF runs each sequence whole with no cache. Ours
runs through state-pool slots: prefill then decode, chunked prefill, interleaved sequences of one continuous batch,
a slot reused by a fresh request, padding rows, the fixed-shape speculative window, and the neuron target's
shape-static ops against the per-sequence reference; the chunked scan against the recurrent step.
"""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.layers.mamba import MambaMixer, ops
from modelgen.runtime.state_cache import PAD_SLOT, StateMetadata
from tests import state_kind_helpers as kind

transformers = pytest.importorskip("transformers")
from transformers.models.jamba import modeling_jamba as hf_jamba  # noqa: E402
from transformers.models.mamba import modeling_mamba as hf_mamba  # noqa: E402

HIDDEN, EXPAND, N, RANK, ATOL = 16, 2, 8, 4, 2e-5


def _pair(kernel: int = 4, conv_bias: bool = True, proj_bias: bool = False, jamba: bool = True, seed: int = 0,
          chunk_size: int = 4):
    """(HF mixer, our MambaMixer) with the same random weights (chunk_size small so prompts span several chunks)."""
    if jamba:
        config = transformers.JambaConfig(hidden_size=HIDDEN, mamba_expand=EXPAND, mamba_d_state=N,
                                          mamba_d_conv=kernel, mamba_dt_rank=RANK, mamba_conv_bias=conv_bias,
                                          mamba_proj_bias=proj_bias, num_hidden_layers=1, rms_norm_eps=1e-6)
        ref = hf_jamba.JambaMambaMixer(config, 0)
    else:
        config = transformers.MambaConfig(hidden_size=HIDDEN, expand=EXPAND, state_size=N, conv_kernel=kernel,
                                          time_step_rank=RANK, use_conv_bias=conv_bias, use_bias=proj_bias,
                                          num_hidden_layers=1)
        ref = hf_mamba.MambaMixer(config, 0)
    torch.manual_seed(seed)
    ref = ref.eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if name == "A_log":
                p.copy_(torch.log(torch.rand_like(p) * 2 + 0.5))
            elif "layernorm" in name or name == "D":
                p.copy_(1 + 0.3 * torch.randn_like(p))
            else:
                p.normal_(0, 0.3)
    ours = MambaMixer(HIDDEN, EXPAND * HIDDEN, N, kernel, RANK, conv_bias, proj_bias,
                      rms_norm_eps=1e-6 if jamba else None, layer_name="layers.0.mamba", chunk_size=chunk_size)
    theirs = kind.copy_weights(ref, ours)
    assert set(theirs) == {n for n, _ in ours.named_parameters()}
    return ref, ours


@pytest.mark.parametrize("jamba, kernel, conv_bias, proj_bias",
                         [(True, 4, True, False), (True, 3, False, True), (False, 4, True, True)])
def test_prefill_then_decode_equals_full_recompute(jamba, kernel, conv_bias, proj_bias):
    ref, ours = _pair(kernel, conv_bias, proj_bias, jamba)
    kind.bind_pool(ours)
    x = torch.randn(13, HIDDEN)
    want = kind.hf_output(ref, x)
    got = kind.prefill_then_decode(ours, x, 9)  # 9 tokens: three scan chunks of 4, the last partial; then decode steps
    assert kind.err(got, want) < ATOL


def test_chunked_scan_equals_recurrent_steps():
    """ops.selective_scan (chunked, any chunk size) == ops.selective_step token by token, outputs and final state."""
    torch.manual_seed(3)
    R, T, D = 2, 11, 6
    A = -torch.rand(D, N) * 3
    h0, x, dt = torch.randn(R, D, N), torch.randn(R, T, D), torch.rand(R, T, D)
    B, C = torch.randn(R, T, N), torch.randn(R, T, N)
    h, ys = h0, []
    for t in range(T):
        y, h = ops.selective_step(h, x[:, t], dt[:, t], A, B[:, t], C[:, t])
        ys.append(y)
    want = torch.stack(ys, 1)
    for chunk in (1, 4, 16):
        got, hT = ops.selective_scan(h0, x, dt, A, B, C, chunk)
        assert torch.allclose(got, want, atol=1e-5) and torch.allclose(hT, h, atol=1e-5), chunk
    assert not torch.allclose(h, h0)  # the state moved on


def test_chunked_prefill_equals_one_shot():
    ref, ours = _pair(4)
    kind.bind_pool(ours)
    x = torch.randn(11, HIDDEN)
    assert kind.err(kind.chunked_prefill(ours, x), kind.hf_output(ref, x)) < ATOL


def test_interleaved_sequences_each_get_their_solo_output():
    """Continuous batching: A prefills, then A decodes beside B's prefill, then both decode; each equals HF alone."""
    ref, ours = _pair(3, conv_bias=False)
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
    assert pool.conv["layers.0.mamba"][3].abs().sum() > 0 and pool.recurrent["layers.0.mamba"][3].abs().sum() > 0
    x = torch.randn(prompt_len + 2, HIDDEN)
    assert kind.err(kind.fresh_request(ours, x, prompt_len), kind.hf_output(ref, x)) < ATOL


def test_padding_rows_touch_no_state_and_give_zeros():
    _, ours = _pair(3)  # no out_proj bias: a padding row's output is exactly zero
    pool = kind.bind_pool(ours)
    kind.fill_slots_0_and_1(ours, HIDDEN)
    before = {k: t.clone() for k, t in (("conv", pool.conv["layers.0.mamba"]),
                                        ("ssm", pool.recurrent["layers.0.mamba"]))}
    y = kind.padding_rows_step(ours, HIDDEN, tokens=5)  # 4 rows and one padding token past the batch
    assert y[[0, 2, 3, 4]].abs().max() == 0
    for key, after in (("conv", pool.conv["layers.0.mamba"]), ("ssm", pool.recurrent["layers.0.mamba"])):
        assert torch.equal(after[0], before[key][0]) and torch.equal(after[2:], before[key][2:]), key
        assert not torch.equal(after[1], before[key][1]), key  # the real row advanced its own slot


def test_speculative_window_equals_decode_steps():
    """The fixed-shape window (tokens_per_seq = 3; one sequence with 2 real tokens) == one decode step per token,
    and a pool snapshot taken before it rolls both states back (the rejected drafts undone)."""
    ref, ours = _pair(3)
    pool = kind.bind_pool(ours)
    a, b = torch.randn(8, HIDDEN), torch.randn(7, HIDDEN)
    kind.prefill_two(ours, a, b)
    snap = pool.snapshot([0, 1])
    y = kind.speculative_window(ours, a, b)
    assert (y[:3] - kind.hf_output(ref, a)[5:]).abs().max().item() < ATOL
    assert (y[3:5] - kind.hf_output(ref, b)[5:]).abs().max().item() < ATOL
    assert y[5].abs().max() == 0
    pool.restore([0, 1], snap, rows=[0])  # sequence 0 accepted no draft: back to its state after 5 tokens
    assert kind.err(kind.step(ours, [(a[5:8], 0, False)]), kind.hf_output(ref, a)[5:]) < ATOL


@pytest.mark.parametrize("decode", [False, True])
def test_static_ops_equal_per_sequence_reference(decode):
    """The neuron ops over a padded bucket (rows 0 and 2 real, row 1 padding; padding tokens) == conv_prefill and
    selective_scan per sequence; the padding row's slots keep their contents."""
    torch.manual_seed(2)
    D, K = 5, 3
    w, b = torch.randn(D, K), torch.randn(D)
    A = -torch.rand(D, N) * 2
    conv_pool, ssm_pool = torch.randn(4, D, K - 1), torch.randn(4, D, N)
    conv_start, ssm_start = conv_pool.clone(), ssm_pool.clone()
    lens = [1, 0, 1] if decode else [4, 0, 3]
    T = 3 if decode else 9
    seq_ids = [0, -1, 2] if decode else [r for r, n in enumerate(lens) for _ in range(n)]
    seq_ids = torch.tensor(seq_ids + [-1] * (T - len(seq_ids)))
    x, dt, B, C = torch.randn(T, D), torch.rand(T, D), torch.randn(T, N), torch.randn(T, N)
    slots, fresh = torch.tensor([2, PAD_SLOT, 0]), torch.tensor([False, False, True])
    xc = ops.conv_static(x, w, b, conv_pool, seq_ids, slots, fresh, decode=decode)
    y = ops.scan_static(xc, dt, A, B, C, ssm_pool, seq_ids, slots, fresh, decode=decode, chunk_size=2)
    for r, slot in ((0, 2), (2, 0)):
        tok = (seq_ids == r).nonzero().flatten()
        conv0 = torch.zeros(D, K - 1) if fresh[r] else conv_start[slot]
        h0 = torch.zeros(D, N) if fresh[r] else ssm_start[slot]
        want_xc, conv1 = ops.conv_prefill(x[tok], w, b, conv0)
        want_y, h1 = ops.selective_scan(h0[None], want_xc[None], dt[tok][None], A, B[tok][None], C[tok][None])
        assert torch.allclose(xc[tok], want_xc, atol=1e-6) and torch.allclose(conv_pool[slot], conv1)
        assert torch.allclose(y[tok], want_y[0], atol=1e-5) and torch.allclose(ssm_pool[slot], h1[0], atol=1e-5)
    assert xc[seq_ids < 0].abs().max() == 0 and y[seq_ids < 0].abs().max() == 0
    assert torch.equal(conv_pool[[1, 3]], conv_start[[1, 3]]) and torch.equal(ssm_pool[[1, 3]], ssm_start[[1, 3]])


def test_dt_norms_matter():
    """Negative control: Jamba's dt/B/C RMSNorms change the output (our layer without them differs from HF's)."""
    ref, ours = _pair(4)
    kind.bind_pool(ours)
    x = torch.randn(6, HIDDEN)
    assert kind.err(kind.step(ours, [(x, 0, True)]), kind.hf_output(ref, x)) < ATOL
    ours.use_rms_norm = False
    assert kind.err(kind.step(ours, [(x, 1, True)]), kind.hf_output(ref, x)) > 1e-3


def test_kind_answers_and_state_spec():
    _, ours = _pair(4)
    spec = ours.state_spec()
    D = EXPAND * HIDDEN
    assert ours.cache_kind == spec.kind == "recurrent_state" and ours.holds_request_state()
    assert spec.conv_shape == (D, 3) and spec.recurrent_shape == (D, N) and spec.recurrent_dtype == torch.float32
    assert spec.bytes_per_slot() == D * 3 * 4 + D * N * 4
    assert ours.step_graph_layouts(3) == {"varlen"} and ours.decode_graph_capturable()
    assert "state writes" in ours.sequence_parallel_refusal()
    assert ours.linears_read_as_matrix() == [ours.dt_proj]
    with pytest.raises(ValueError, match=r"conv_state .* expected \[num_slots, 32, 3\]"):
        ours.bind_state(torch.zeros(2, D, 2), torch.zeros(2, D, N))
    with pytest.raises(RuntimeError, match="no state bound"):
        MambaMixer(HIDDEN, D, N, 3, RANK, False, False)(torch.zeros(1, HIDDEN), StateMetadata.build([1], [0], [True]))
    with pytest.raises(ValueError, match="at least 2"):
        MambaMixer(HIDDEN, D, N, 1, RANK, False, False)
