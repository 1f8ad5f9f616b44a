"""Sliding-window, attention-sink and logit soft-capping paths of the Triton paged attention
(``runtime/layers/attention/kernels.py``: GPT-OSS, Mistral/Gemma-style windows, Gemma 2's softcap) against the torch
references of ``runtime/layers/attention/ops.py``. Skipped without CUDA; ``TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1``
runs them on the CPU through Triton's interpreter.

Every cache row the kernels have no business reading is NaN: positions before the window, the slots past the context
in a sequence's last block, blocks its table lists past the context, blocks no table lists, and (decode) the step's
own slot, which the kernel writes without reading. A read would poison the output (a masked probability 0 times NaN is
NaN), while the reference gathers from the clean cache.
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu_helpers import DEV, KERNEL_MARKS, LOW, rel

pytestmark = KERNEL_MARKS


def tol(dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 1.2e-2


def _setup(B, KVH, D, BS, W, dtype, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    NB = B * W + 4
    kc = torch.randn(NB, KVH, BS, D, device=DEV, generator=g).to(dtype)
    vc = torch.randn(NB, KVH, BS, D, device=DEV, generator=g).to(dtype)
    tables = torch.randperm(NB, device=DEV, generator=g)[: B * W].view(B, W).int()
    return kc, vc, tables, g


def _poison_outside(cache, tables, lo_pos, hi_pos):
    """A copy of ``cache`` with NaN in every row except positions ``lo_pos[b] <= p < hi_pos[b]`` of sequence b."""
    bs = cache.shape[2]
    keep = torch.zeros(cache.shape[0], bs, dtype=torch.bool)
    tab = tables.cpu().long()
    for b, (lo, hi) in enumerate(zip(lo_pos, hi_pos)):
        pos = torch.arange(int(lo), int(hi))
        keep[tab[b, pos // bs], pos % bs] = True
    return cache.masked_fill(~keep.to(cache.device)[:, None, :, None], float("nan"))


def _decode_case(dtype, window, sinks, splits, softcap=None):
    """(kernel output, reference, reference without the softcap) of one decode step over poisoned caches."""
    from modelgen.runtime.layers.attention import ops as ref
    from modelgen.runtime.layers.attention import kernels as ga

    B, H, KVH, D, BS, W = 4, 8, 2, 32, 8, 12
    kc, vc, tables, g = _setup(B, KVH, D, BS, W, dtype, seed=(window or 0) + 7 * sinks)
    ctx = torch.tensor([1, 9, 40, BS * W - 2], device=DEV, dtype=torch.int32)
    q = torch.randn(B, H, D, device=DEV, generator=g).to(dtype)
    k = torch.randn(B, KVH, D, device=DEV, generator=g).to(dtype)
    v = torch.randn(B, KVH, D, device=DEV, generator=g).to(dtype)
    sink = (torch.randn(H, device=DEV, generator=g) * 2).to(dtype) if sinks else None
    pos = ctx.long() - 1
    slots = tables.long().gather(1, (pos // BS)[:, None])[:, 0] * BS + pos % BS
    kr, vr = kc.clone(), vc.clone()
    ref.write_paged_kv(k, v, kr, vr, slots)
    want = ref.paged_decode_attention(q, kr, vr, tables, ctx, D ** -0.5, sliding_window=window, sinks=sink,
                                      softcap=softcap)
    plain = ref.paged_decode_attention(q, kr, vr, tables, ctx, D ** -0.5, sliding_window=window, sinks=sink)
    lo = [0] * B if window is None else [max(0, int(c) - window) for c in ctx]
    hi = [int(c) - 1 for c in ctx]  # the step's own slot: written by the kernel, never read
    k2, v2 = _poison_outside(kc, tables, lo, hi), _poison_outside(vc, tables, lo, hi)
    got = ga.paged_decode(q, k, v, k2, v2, tables, ctx, slots, D ** -0.5, num_splits=splits, sliding_window=window,
                          sinks=sink, softcap=softcap)
    return got, want, plain


def _prefill_case(dtype, window, sinks, softcap=None):
    from modelgen.runtime.layers.attention import ops as ref
    from modelgen.runtime.layers.attention import kernels as ga

    H, KVH, D, BS = 4, 2, 32, 8
    ns, ctxs = [150, 1, 17, 70], [150, 40, 90, 70]  # prefixes 0, 39 (a decode row), 73, 0
    W = 150 // BS + 1
    kc, vc, tables, g = _setup(4, KVH, D, BS, W, dtype, seed=(window or 0) + 3 * sinks)
    cu = torch.tensor([0] + torch.tensor(ns).cumsum(0).tolist(), device=DEV, dtype=torch.int32)
    T = sum(ns)
    q = torch.randn(T, H, D, device=DEV, generator=g).to(dtype)
    k = torch.randn(T, KVH, D, device=DEV, generator=g).to(dtype)
    v = torch.randn(T, KVH, D, device=DEV, generator=g).to(dtype)
    sink = (torch.randn(H, device=DEV, generator=g) * 2).to(dtype) if sinks else None
    tl_ = tables.long().cpu()
    slots = torch.tensor([tl_[b, p // BS] * BS + p % BS for b in range(4) for p in range(ctxs[b] - ns[b], ctxs[b])],
                         device=DEV)
    kr, vr = kc.clone(), vc.clone()
    ref.write_paged_kv(k, v, kr, vr, slots)
    ctx_t = torch.tensor(ctxs, device=DEV, dtype=torch.int32)
    want = ref.paged_prefill_attention(q, kr, vr, cu, ctx_t, tables, D ** -0.5, sliding_window=window, sinks=sink,
                                       softcap=softcap)
    plain = ref.paged_prefill_attention(q, kr, vr, cu, ctx_t, tables, D ** -0.5, sliding_window=window, sinks=sink)
    # the first query of each sequence sees from (its position - W + 1): nothing before that is read
    lo = [0] * 4 if window is None else [max(0, c - n - window + 1) for c, n in zip(ctxs, ns)]
    k2, v2 = _poison_outside(kr, tables, lo, ctxs), _poison_outside(vr, tables, lo, ctxs)
    got = ga.paged_prefill(q, k2, v2, cu, ctx_t, tables, D ** -0.5, max(ns), sliding_window=window, sinks=sink,
                           softcap=softcap)
    return got, want, plain


@pytest.mark.parametrize("dtype", [torch.float32, LOW])
@pytest.mark.parametrize("window,sinks", [(None, False), (24, False), (None, True), (24, True), (5, True)])
@pytest.mark.parametrize("splits", [None, 1, 3])
def test_decode_window_and_sinks(dtype, window, sinks, splits):
    got, want, _ = _decode_case(dtype, window, sinks, splits)
    assert rel(got, want) < tol(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, LOW])
@pytest.mark.parametrize("window,sinks", [(None, False), (24, False), (None, True), (40, True), (3, False)])
def test_prefill_window_and_sinks(dtype, window, sinks):
    got, want, _ = _prefill_case(dtype, window, sinks)
    assert rel(got, want) < tol(dtype)


# A cap near the scores' spread (q.k * D^-0.5 ~ N(0, 1) here), so tanh bends them: Gemma 2 uses 50 on larger scores.
CAP = 1.5


@pytest.mark.parametrize("dtype", [torch.float32, LOW])
@pytest.mark.parametrize("window,sinks", [(None, False), (24, False), (5, True)])
@pytest.mark.parametrize("splits", [1, 3])
def test_decode_softcap(dtype, window, sinks, splits):
    got, want, plain = _decode_case(dtype, window, sinks, splits, softcap=CAP)
    assert rel(got, want) < tol(dtype)
    assert rel(got, plain) > 10 * tol(dtype)  # the cap changed the result: the kernel did apply it


@pytest.mark.parametrize("dtype", [torch.float32, LOW])
@pytest.mark.parametrize("window,sinks", [(None, False), (24, False), (3, True)])
def test_prefill_softcap(dtype, window, sinks):
    got, want, plain = _prefill_case(dtype, window, sinks, softcap=CAP)
    assert rel(got, want) < tol(dtype)
    assert rel(got, plain) > 10 * tol(dtype)


def test_softcapped_layer_takes_the_kernel(monkeypatch):
    """``PagedAttention`` with a softcap runs the Triton decode (no longer the reference) and matches the reference."""
    from modelgen.runtime.layers.attention import AttentionMetadata, PagedAttention
    from modelgen.runtime.layers.attention import ops as ref
    from modelgen.runtime.layers.attention import kernels as ga

    B, H, KVH, D, BS, W = 4, 8, 2, 32, 8, 12
    kc, vc, tables, g = _setup(B, KVH, D, BS, W, torch.float32, seed=11)
    ctx = torch.tensor([1, 9, 40, 60], device=DEV, dtype=torch.int32)
    q = torch.randn(B, H, D, device=DEV, generator=g)
    k = torch.randn(B, KVH, D, device=DEV, generator=g)
    v = torch.randn(B, KVH, D, device=DEV, generator=g)
    pos = ctx.long() - 1
    slots = tables.long().gather(1, (pos // BS)[:, None])[:, 0] * BS + pos % BS
    kr, vr = kc.clone(), vc.clone()
    ref.write_paged_kv(k, v, kr, vr, slots)
    want = ref.paged_decode_attention(q, kr, vr, tables, ctx, D ** -0.5, softcap=CAP)

    calls = []
    real = ga.paged_decode
    monkeypatch.setattr(ga, "paged_decode", lambda *a, **kw: calls.append(kw["softcap"]) or real(*a, **kw))
    layer = PagedAttention(H, KVH, D, D ** -0.5, "layers.0.self_attn", softcap=CAP)
    layer.k_cache, layer.v_cache = kc, vc
    meta = AttentionMetadata(is_prefill=False, slot_mapping=slots, cu_seqlens_q=torch.arange(B + 1, device=DEV),
                             context_lens=ctx, block_tables=tables, max_seqlen_q=1)
    got = layer(q, k, v, meta)
    assert calls == [CAP]
    assert rel(got.view(B, H, D), want) < tol(torch.float32)
