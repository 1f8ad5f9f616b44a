"""Triton MLA decode (DeepSeek-V2/V3 weight-absorbed attention) over the paged latent cache.

``runtime/layers/mla/ops.py``'s ``paged_decode`` defines the function: one absorbed query per sequence ``q [B, H, r + dr]``
(``[W_UK^T q_nope | q_pe]``) attends the sequence's cached rows ``[c (r) | k_pe (dr)]``, every head the same single
latent "head" (score ``q_c . c_j + q_pe . k_pe_j``, value ``c_j``), and returns ``[B, H, r]`` (expanded through W_UV
by the caller). The reference gathers each sequence's whole padded cache into a dense tensor first; this kernel reads
each cached row once per group of ``BLOCK_H`` heads straight from its block, with an online softmax (flash-decoding):

* grid ``(B, H / BLOCK_H, splits)``; a program loads ``BLOCK_N`` rows ``[BLOCK_N, r]`` and ``[BLOCK_N, dr]`` per step
  and does two tensor-core products per step (scores, then ``p @ c``), so the latent is read ``H / BLOCK_H`` times
  from L2 but once from HBM;
* ``splits`` > 1 cuts the context into contiguous ranges when ``B * H / BLOCK_H`` programs cannot fill the GPU; a
  second launch merges the ranges by their log-sum-exp.

No host reads and shapes fixed by ``(B, H, block table width)``: capturable in the decode CUDA graphs. Rows past
``context_lens[b]`` are masked (a context of 0, a padding row of a graph bucket, returns zeros).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...ops.gpu import interpreting, next_pow2, num_sms


@triton.jit
def _mla_step(n0, end, b, qc, qr, cache_ptr, bt_ptr, s_cb, s_ct, s_bt, scale, m_i, l_i, acc,
              R: tl.constexpr, DR: tl.constexpr, BR: tl.constexpr, BDR: tl.constexpr, BLOCK_SIZE: tl.constexpr,
              BLOCK_N: tl.constexpr):
    """One block of BLOCK_N cached rows: scores of every head in the group, online-softmax update."""
    rr = tl.arange(0, BR)
    dd = tl.arange(0, BDR)
    tok = n0 + tl.arange(0, BLOCK_N)
    tm = tok < end
    blk = tl.load(bt_ptr + b.to(tl.int64) * s_bt + tok // BLOCK_SIZE, mask=tm, other=0).to(tl.int64)
    row = cache_ptr + blk * s_cb + (tok % BLOCK_SIZE).to(tl.int64) * s_ct
    c = tl.load(row[:, None] + rr[None, :], mask=tm[:, None] & (rr[None, :] < R), other=0.0)  # [N, R]
    kr = tl.load(row[:, None] + R + dd[None, :], mask=tm[:, None] & (dd[None, :] < DR), other=0.0)  # [N, DR]
    s = tl.dot(qc, tl.trans(c.to(qc.dtype)), input_precision="ieee") \
        + tl.dot(qr, tl.trans(kr.to(qr.dtype)), input_precision="ieee")  # [BLOCK_H, N] float32
    s = tl.where(tm[None, :], s * scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m_i - m_safe)
    p = tl.exp(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(c.dtype), c, input_precision="ieee")
    return m_new, l_i, acc


@triton.jit
def _mla_decode_kernel(
    q_ptr, cache_ptr, bt_ptr, ctx_ptr, o_ptr, po_ptr, lse_ptr,
    s_qb, s_qh, s_cb, s_ct, s_bt, s_ob, s_oh, H, scale, split_len,
    R: tl.constexpr, DR: tl.constexpr, BR: tl.constexpr, BDR: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, DYNAMIC: tl.constexpr,
    N_ITER: tl.constexpr,
):
    b = tl.program_id(0)
    hb = tl.program_id(1)
    sp = tl.program_id(2)
    heads = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = heads < H
    rr = tl.arange(0, BR)
    dd = tl.arange(0, BDR)
    qrow = q_ptr + b.to(tl.int64) * s_qb + heads[:, None] * s_qh
    qc = tl.load(qrow + rr[None, :], mask=hm[:, None] & (rr[None, :] < R), other=0.0)
    qr = tl.load(qrow + R + dd[None, :], mask=hm[:, None] & (dd[None, :] < DR), other=0.0)
    ctx = tl.load(ctx_ptr + b)
    start = sp * split_len
    end = tl.minimum(start + split_len, ctx)
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BR], dtype=tl.float32)
    if DYNAMIC:  # compiled: stop at the context
        for it in range(0, tl.cdiv(tl.maximum(end - start, 0), BLOCK_N)):
            m_i, l_i, acc = _mla_step(start + it * BLOCK_N, end, b, qc, qr, cache_ptr, bt_ptr, s_cb, s_ct, s_bt,
                                      scale, m_i, l_i, acc, R, DR, BR, BDR, BLOCK_SIZE, BLOCK_N)
    else:  # Triton 3.6's interpreter (numpy 2) loops only to constexpr bounds: the split's whole range, masked
        for it in range(0, N_ITER):
            m_i, l_i, acc = _mla_step(start + it * BLOCK_N, end, b, qc, qr, cache_ptr, bt_ptr, s_cb, s_ct, s_bt,
                                      scale, m_i, l_i, acc, R, DR, BR, BDR, BLOCK_SIZE, BLOCK_N)
    has = l_i > 0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    if SPLITS == 1:
        optr = o_ptr + b.to(tl.int64) * s_ob + heads[:, None] * s_oh + rr[None, :]
        tl.store(optr, out.to(o_ptr.dtype.element_ty), mask=hm[:, None] & (rr[None, :] < R))
    else:
        base = (b.to(tl.int64) * H + heads) * SPLITS + sp  # [BLOCK_H]: partials [B, H, SPLITS, (R)]
        tl.store(po_ptr + base[:, None] * BR + rr[None, :], out, mask=hm[:, None])
        lse = tl.where(has, m_i + tl.log(tl.where(has, l_i, 1.0)), float("-inf"))
        tl.store(lse_ptr + base, lse, mask=hm)


@triton.jit
def _mla_combine_kernel(po_ptr, lse_ptr, o_ptr, s_ob, s_oh, H, R: tl.constexpr, BR: tl.constexpr,
                        SPLITS: tl.constexpr, BS: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    base = (b.to(tl.int64) * H + h) * SPLITS
    ss = tl.arange(0, BS)
    lse = tl.load(lse_ptr + base + ss, mask=ss < SPLITS, other=float("-inf"))
    m = tl.max(lse, 0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse - m_safe)  # empty ranges: exp(-inf) = 0
    tot = tl.sum(w, 0)
    rr = tl.arange(0, BR)
    parts = tl.load(po_ptr + (base + ss)[:, None] * BR + rr[None, :], mask=(ss < SPLITS)[:, None], other=0.0)
    out = tl.sum(parts * w[:, None], 0) / tl.where(tot > 0, tot, 1.0)
    tl.store(o_ptr + b.to(tl.int64) * s_ob + h * s_oh + rr, out.to(o_ptr.dtype.element_ty), mask=rr < R)


def paged_decode(q: torch.Tensor, cache: torch.Tensor, block_tables: torch.Tensor, context_lens: torch.Tensor,
                 scale: float, latent_dim: int, splits: int | None = None) -> torch.Tensor:
    """``q [B, H, r + dr]`` (absorbed), ``cache [num_blocks, block_size, >= r + dr]`` -> ``[B, H, r]`` in q's dtype.
    ``splits``: context ranges per (sequence, head group); None picks enough programs to fill the GPU."""
    B, H, D = q.shape
    R, DR = latent_dim, D - latent_dim
    if q.stride(-1) != 1:
        q = q.contiguous()
    if cache.stride(-1) != 1:
        raise ValueError("mla paged_decode: the latent cache's last dim must be contiguous")
    out = torch.empty((B, H, R), dtype=q.dtype, device=q.device)
    if B == 0:
        return out
    BS = cache.shape[1]
    width = block_tables.shape[1] * BS  # static per CUDA-graph bucket
    BLOCK_H, BLOCK_N = 16, 32 if R >= 256 else 64
    BR, BDR = next_pow2(R), max(16, next_pow2(DR))
    groups = triton.cdiv(H, BLOCK_H)
    if splits is None:
        want = triton.cdiv(2 * num_sms(q.device.index), B * groups)
        splits = max(1, min(want, triton.cdiv(width, 4 * BLOCK_N), 16))
    split_len = triton.cdiv(triton.cdiv(width, splits), BLOCK_N) * BLOCK_N
    n_iter = split_len // BLOCK_N
    if splits > 1:
        partial = torch.empty((B, H, splits, BR), dtype=torch.float32, device=q.device)
        lse = torch.empty((B, H, splits), dtype=torch.float32, device=q.device)
    else:
        partial = lse = out  # unused
    ctx = context_lens.to(torch.int32) if context_lens.dtype != torch.int32 else context_lens
    bt = block_tables if block_tables.stride(-1) == 1 else block_tables.contiguous()
    _mla_decode_kernel[(B, groups, splits)](
        q, cache, bt, ctx, out, partial, lse,
        q.stride(0), q.stride(1), cache.stride(0), cache.stride(1), bt.stride(0), out.stride(0), out.stride(1), H,
        scale, split_len,
        R=R, DR=DR, BR=BR, BDR=BDR, BLOCK_SIZE=BS, BLOCK_H=BLOCK_H, BLOCK_N=BLOCK_N, SPLITS=splits,
        DYNAMIC=not interpreting(), N_ITER=0 if not interpreting() else n_iter,
        num_warps=4 if BR <= 256 else 8, num_stages=2,
    )
    if splits > 1:
        _mla_combine_kernel[(B, H)](partial, lse, out, out.stride(0), out.stride(1), H, R=R, BR=BR, SPLITS=splits,
                                    BS=max(2, next_pow2(splits)), num_warps=4)
    return out
