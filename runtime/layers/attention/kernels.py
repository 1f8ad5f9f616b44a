"""Triton kernels for attention over the paged KV cache (layout of ``runtime/layers/attention/ops.py``: HND blocks
``[num_blocks, num_kv_heads, block_size, head_dim]``, slot ``s`` = block ``s // block_size``, offset ``s % block_size``).

* :func:`write_kv` (optionally RoPE-ing q and k first, and per-head RMS-normalising them before that): one launch
  writes the new tokens' K/V at their slots.
* :func:`paged_prefill`: varlen causal flash attention. Queries are the flattened new tokens; each sequence's keys
  are read through its block table (cached prefix + the new tokens just written), so chunked prefill and prefix
  reuse work and nothing is padded to a dense ``[batch, max_len]`` tensor.
* :func:`paged_decode`: one query per sequence, flash-decoding split over the context (``num_splits`` programs per
  (sequence, KV head), each covering a contiguous chunk, merged by a small reduce kernel). All query heads of one
  KV head share a program, so each K/V tile is read once per step. The step's own K/V come in as arguments: the
  kernel folds them in from registers and writes them to the cache (the write is fused into the attention launch;
  no program reads that slot, so there is no race). With ``rope`` the kernel also rotates q and the new k, and with
  ``qk_norm`` normalises each of their heads first.

Both attention kernels take the per-layer options of the references (``sliding_window``, ``sinks``, ``softcap``) as
constexpr switches, so a layer without them compiles none of their code.

Nothing here synchronises with the host or has a data-dependent shape: grid sizes depend only on tensor shapes and
host integers that are fixed per CUDA-graph bucket.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ...ops.gpu import next_pow2, num_sms
from ...ops.gpu.rope import _rope_coeffs  # the RoPE kernel's rotation, fused into the cache write and decode

LOG2E = 1.4426950408889634


@triton.jit
def _head_rms(x, xp, w_ptr, offs_d, partner, dmask, eps, D: tl.constexpr, NORM: tl.constexpr):
    """Per-head RMSNorm (Qwen3 / GLM4 ``q_norm``/``k_norm``, weight ``[D]`` shared by the heads) of the rows ``x``
    (``[R, BLOCK_D]`` or ``[BLOCK_D]``) and of their RoPE partners ``xp`` (same rows, permuted dims), returned float32
    after rounding to ``x``'s dtype as the torch path rounds the norm's output before RoPE (``runtime/ops/norm.py``).
    NORM 1: HF Llama order ``w * x_hat.to(dtype)``; 2: zero-centred ``(x_hat * (1 + w)).to(dtype)`` (Qwen3-Next,
    Gemma 3); 3: ``(w * x_hat).to(dtype)`` (float32 weight product). Padding dims load as 0 and do not count."""
    DT = x.dtype
    xf = x.to(tl.float32)
    rstd = tl.math.rsqrt(tl.sum(xf * xf, axis=-1, keep_dims=True) / D + eps)
    w = tl.load(w_ptr + offs_d, mask=dmask, other=0.0).to(tl.float32)
    wp = tl.load(w_ptr + partner, mask=dmask, other=0.0).to(tl.float32)
    h, hp = xf * rstd, xp.to(tl.float32) * rstd
    if NORM == 1:
        y, yp = w * h.to(DT).to(tl.float32), wp * hp.to(DT).to(tl.float32)
    elif NORM == 2:
        y, yp = h * (1.0 + w), hp * (1.0 + wp)
    else:
        y, yp = w * h, wp * hp
    return y.to(DT).to(tl.float32), yp.to(DT).to(tl.float32)


@triton.jit
def _scores(qk, qk_scale, cap_l2, SOFTCAP: tl.constexpr):
    """Raw ``q . k`` -> the softmax logits in log2 units (the kernels use exp2). Plain: ``qk * scale * log2(e)``.
    Soft-capped (Gemma 2 ``attn_logit_softcapping`` c; HF's eager order: scale, then ``c * tanh(s / c)``, then the
    mask): the host passes ``qk_scale = scale / c`` and ``cap_l2 = c * log2(e)``. tanh from ``exp(-2|x|)``, which
    neither overflows nor loses the sign near 0."""
    if SOFTCAP:
        x = qk * qk_scale
        e = tl.math.exp(-2.0 * tl.abs(x))
        t = (1.0 - e) / (1.0 + e)
        return tl.where(x < 0, -t, t) * cap_l2
    else:
        return qk * qk_scale


def _score_args(scale: float, softcap: float | None) -> tuple[float, float]:
    """``(qk_scale, cap_l2)`` of :func:`_scores`."""
    if softcap is None:
        return scale * LOG2E, 0.0
    return scale / softcap, softcap * LOG2E


# ------------------------------------------------------------------------------------------------- cache write (+RoPE)
@triton.jit
def _write_kv_kernel(
    q_ptr, k_ptr, v_ptr, qo_ptr, ko_ptr, kc_ptr, vc_ptr, slot_ptr, pos_ptr, cs_ptr, qw_ptr, kw_ptr, eps,
    s_qt, s_qh, s_kt, s_kh, s_vt, s_vh, s_qot, s_qoh, s_kot, s_koh,
    s_c0, s_c1, s_c2,
    H: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_KVH: tl.constexpr,
    BLOCK_D: tl.constexpr, BS: tl.constexpr, ROPE: tl.constexpr, ROT: tl.constexpr, PAIRWISE: tl.constexpr,
    NORM: tl.constexpr = 0,
):
    t = tl.program_id(0)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < D
    offs_kh = tl.arange(0, BLOCK_KVH)
    kmask = (offs_kh < KVH)[:, None] & dmask[None, :]
    k = tl.load(k_ptr + t * s_kt + offs_kh[:, None] * s_kh + offs_d[None, :], mask=kmask, other=0.0)
    if ROPE:
        pos = tl.load(pos_ptr + t)
        cos, sin, partner = _rope_coeffs(cs_ptr, pos, offs_d, ROT, PAIRWISE)
        kp = tl.load(k_ptr + t * s_kt + offs_kh[:, None] * s_kh + partner[None, :], mask=kmask, other=0.0)
        if NORM > 0:
            k, kp = _head_rms(k, kp, kw_ptr, offs_d, partner, dmask, eps, D, NORM)
        k = (k.to(tl.float32) * cos[None, :] + kp.to(tl.float32) * sin[None, :]).to(ko_ptr.dtype.element_ty)
        tl.store(ko_ptr + t * s_kot + offs_kh[:, None] * s_koh + offs_d[None, :], k, mask=kmask)
        offs_h = tl.arange(0, BLOCK_H)
        qmask = (offs_h < H)[:, None] & dmask[None, :]
        q = tl.load(q_ptr + t * s_qt + offs_h[:, None] * s_qh + offs_d[None, :], mask=qmask, other=0.0)
        qp = tl.load(q_ptr + t * s_qt + offs_h[:, None] * s_qh + partner[None, :], mask=qmask, other=0.0)
        if NORM > 0:
            q, qp = _head_rms(q, qp, qw_ptr, offs_d, partner, dmask, eps, D, NORM)
        q = q.to(tl.float32) * cos[None, :] + qp.to(tl.float32) * sin[None, :]
        tl.store(qo_ptr + t * s_qot + offs_h[:, None] * s_qoh + offs_d[None, :], q.to(qo_ptr.dtype.element_ty), mask=qmask)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        v = tl.load(v_ptr + t * s_vt + offs_kh[:, None] * s_vh + offs_d[None, :], mask=kmask, other=0.0)
        dst = (slot // BS) * s_c0 + offs_kh[:, None] * s_c1 + (slot % BS) * s_c2 + offs_d[None, :]
        tl.store(kc_ptr + dst, k.to(kc_ptr.dtype.element_ty), mask=kmask)
        tl.store(vc_ptr + dst, v.to(vc_ptr.dtype.element_ty), mask=kmask)


# qk_norm mode -> the NORM switch of :func:`_head_rms`
QK_NORM_MODES = {"rms": 1, "zero_centred_rms": 2, "rms_float32": 3}


def _qk_norm_args(qk_norm: tuple | None, rope: tuple | None, like: torch.Tensor) -> tuple:
    """``(q_weight, k_weight, eps, NORM)`` kernel arguments of ``qk_norm`` (placeholders and 0 when None)."""
    if qk_norm is None:
        return like, like, 0.0, 0
    qw, kw, eps, mode = qk_norm
    if rope is None:
        raise ValueError("qk_norm is fused with RoPE only: pass rope as well")
    if mode not in QK_NORM_MODES:
        raise ValueError(f"qk_norm mode {mode!r}: expected one of {sorted(QK_NORM_MODES)}")
    D = like.shape[-1]
    if qw.shape != (D,) or kw.shape != (D,) or not (qw.is_contiguous() and kw.is_contiguous()):
        raise ValueError(f"qk_norm weights have shapes {tuple(qw.shape)}, {tuple(kw.shape)}; expected contiguous ({D},)")
    return qw, kw, float(eps), QK_NORM_MODES[mode]


def write_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor,
    q: torch.Tensor | None = None, rope: tuple | None = None, qk_norm: tuple | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Write ``k, v [T, KVH, D]`` at ``slot_mapping`` (-1 = skip). With ``rope = (positions, cos_sin, rotary_dim,
    pairwise)`` q and k are rotated first (one launch) and the rotated ``(q, k)`` are returned. ``qk_norm =
    (q_weight [D], k_weight [D], eps, mode)`` (with ``rope`` only; :data:`QK_NORM_MODES`) normalises each head of q
    and k before the rotation, in the same launch (Qwen3 / GLM4 per-head QK RMSNorm)."""
    T, KVH, D = k.shape
    if T == 0:
        return q, k
    qw, kw, eps, norm = _qk_norm_args(qk_norm, rope, k)
    assert k.stride(-1) == 1 and v.stride(-1) == 1 and k_cache.is_contiguous() and v_cache.is_contiguous()
    if rope is not None:
        positions, cos_sin, rot, pairwise = rope
        assert q is not None and q.stride(-1) == 1
        H = q.shape[1]
        qo, ko = torch.empty(q.shape, dtype=q.dtype, device=q.device), torch.empty(k.shape, dtype=k.dtype, device=k.device)
    else:
        positions, cos_sin, rot, pairwise = slot_mapping, k, 2, False
        q, qo, ko, H = k, k, k, 1
    _write_kv_kernel[(T,)](
        q, k, v, qo, ko, k_cache, v_cache, slot_mapping, positions, cos_sin, qw, kw, eps,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        qo.stride(0), qo.stride(1), ko.stride(0), ko.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        H=H, KVH=KVH, D=D, BLOCK_H=next_pow2(H), BLOCK_KVH=next_pow2(KVH), BLOCK_D=next_pow2(D),
        BS=k_cache.shape[2], ROPE=rope is not None, ROT=rot, PAIRWISE=bool(pairwise), NORM=norm,
    )
    return (qo, ko) if rope is not None else (None, k)


# ---------------------------------------------------------------------------------------------------- varlen prefill
@triton.jit
def _prefill_tile(
    acc, m_i, l_i, qt, kc_ptr, vc_ptr, bt_row, kvh, j0, qpos, ctx, qk_scale, cap_l2, offs_d, dmask,
    s_c0, s_c1, s_c2, BLOCK_N: tl.constexpr, BS: tl.constexpr, MASKED: tl.constexpr, IEEE: tl.constexpr,
    WINDOW: tl.constexpr = 0, SOFTCAP: tl.constexpr = False,
):
    offs_n = j0 + tl.arange(0, BLOCK_N)
    if MASKED:
        nvalid = offs_n < ctx
        blk = tl.load(bt_row + offs_n // BS, mask=nvalid, other=0).to(tl.int64)
        kvmask = nvalid[:, None] & dmask[None, :]  # keys past the context are not read (block 0 is not theirs)
    else:
        blk = tl.load(bt_row + offs_n // BS).to(tl.int64)
        kvmask = dmask[None, :]
    base = blk * s_c0 + kvh * s_c1 + (offs_n % BS) * s_c2
    ptrs = base[:, None] + offs_d[None, :]
    k = tl.load(kc_ptr + ptrs, mask=kvmask, other=0.0)
    if IEEE:
        qk = tl.dot(qt, tl.trans(k), input_precision="ieee")
    else:
        qk = tl.dot(qt, tl.trans(k))
    qk = _scores(qk, qk_scale, cap_l2, SOFTCAP)
    if MASKED:
        visible = (offs_n[None, :] <= qpos[:, None]) & nvalid[None, :]
        if WINDOW > 0:  # q - W < k <= q: a row may see none of this tile's keys yet
            visible = visible & (offs_n[None, :] > qpos[:, None] - WINDOW)
        qk = tl.where(visible, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    if WINDOW > 0:  # all-masked so far: keep exp2 away from (-inf) - (-inf)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    alpha = tl.math.exp2(m_i - m_use)
    p = tl.math.exp2(qk - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(vc_ptr + ptrs, mask=kvmask, other=0.0)
    if IEEE:
        pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
    else:
        pv = tl.dot(p.to(v.dtype), v)
    acc = acc * alpha[:, None] + pv
    return acc, m_new, l_i


@triton.jit
def _prefill_kernel(
    q_ptr, kc_ptr, vc_ptr, o_ptr, cu_ptr, ctx_ptr, bt_ptr, sink_ptr, qk_scale, cap_l2, num_m_blocks,
    s_qt, s_qh, s_ot, s_oh, s_c0, s_c1, s_c2, s_bt,
    GROUP: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BS: tl.constexpr, IEEE: tl.constexpr, WINDOW: tl.constexpr = 0, SINKS: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False,
):
    h = tl.program_id(0)
    mb = num_m_blocks - 1 - tl.program_id(1)  # longest tiles first
    b = tl.program_id(2)
    q_start = tl.load(cu_ptr + b)
    n = tl.load(cu_ptr + b + 1) - q_start
    if mb * BLOCK_M < n:
        ctx = tl.load(ctx_ptr + b)
        prefix = ctx - n
        kvh = h // GROUP
        offs_m = mb * BLOCK_M + tl.arange(0, BLOCK_M)
        mmask = offs_m < n
        offs_d = tl.arange(0, BLOCK_D)
        dmask = offs_d < D
        rows = (q_start + offs_m).to(tl.int64)
        qmask = mmask[:, None] & dmask[None, :]
        qt = tl.load(q_ptr + rows[:, None] * s_qt + h * s_qh + offs_d[None, :], mask=qmask, other=0.0)
        qpos = prefix + offs_m
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        bt_row = bt_ptr + b.to(tl.int64) * s_bt
        first = prefix + mb * BLOCK_M  # position of this tile's first query
        full_end = ((first + 1) // BLOCK_N) * BLOCK_N  # keys every row of the tile sees
        last = tl.minimum(first + BLOCK_M, ctx)
        if WINDOW > 0:  # keys from the first one the tile's first query sees (unaligned): nothing before is read
            lo = tl.maximum(first - WINDOW + 1, 0)
            for j0 in range(lo, last, BLOCK_N):
                acc, m_i, l_i = _prefill_tile(acc, m_i, l_i, qt, kc_ptr, vc_ptr, bt_row, kvh, j0, qpos, ctx,
                                              qk_scale, cap_l2, offs_d, dmask, s_c0, s_c1, s_c2, BLOCK_N, BS, True,
                                              IEEE, WINDOW, SOFTCAP)
        else:
            for j0 in range(0, full_end, BLOCK_N):
                acc, m_i, l_i = _prefill_tile(acc, m_i, l_i, qt, kc_ptr, vc_ptr, bt_row, kvh, j0, qpos, ctx,
                                              qk_scale, cap_l2, offs_d, dmask, s_c0, s_c1, s_c2, BLOCK_N, BS, False,
                                              IEEE, 0, SOFTCAP)
            for j0 in range(full_end, last, BLOCK_N):
                acc, m_i, l_i = _prefill_tile(acc, m_i, l_i, qt, kc_ptr, vc_ptr, bt_row, kvh, j0, qpos, ctx,
                                              qk_scale, cap_l2, offs_d, dmask, s_c0, s_c1, s_c2, BLOCK_N, BS, True,
                                              IEEE, 0, SOFTCAP)
        if SINKS:  # the head's sink logit joins the denominator (in the kernel's log2 units)
            sink = tl.load(sink_ptr + h).to(tl.float32) * 1.4426950408889634
            l_i = l_i + tl.math.exp2(sink - m_i)
        out = acc / l_i[:, None]
        tl.store(o_ptr + rows[:, None] * s_ot + h * s_oh + offs_d[None, :], out.to(o_ptr.dtype.element_ty), mask=qmask)


def _prefill_config(dtype: torch.dtype, block_d: int, max_q: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages)."""
    wide = dtype == torch.float32 or block_d > 128
    if max_q >= 128 and not wide:
        return 128, 64, 8, 3
    bm = 64 if max_q >= 64 else max(16, next_pow2(max_q))
    return bm, 32 if wide else 64, 4, 2


def paged_prefill(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
    context_lens: torch.Tensor, block_tables: torch.Tensor, scale: float, max_seqlen_q: int,
    sliding_window: int | None = None, sinks: torch.Tensor | None = None, softcap: float | None = None,
) -> torch.Tensor:
    """``q [T, H, D]`` -> ``[T, H, D]``; same contract as :func:`modelgen.runtime.layers.attention.ops.paged_prefill_attention`
    (``sliding_window``: key k visible to query q iff ``q - W < k <= q``, blocks wholly before a tile's window are not
    read; ``sinks [H]``: per-head logits in the softmax denominator; ``softcap`` c: scaled scores become
    ``c * tanh(s / c)`` before the mask, Gemma 2)."""
    T, H, D = q.shape
    KVH, BS = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty((T, H, D), dtype=q.dtype, device=q.device)
    num_seqs = cu_seqlens_q.shape[0] - 1
    if T == 0 or num_seqs == 0:
        return out
    block_d = max(16, next_pow2(D))
    bm, bn, warps, stages = _prefill_config(q.dtype, block_d, max_seqlen_q)
    num_m = triton.cdiv(max_seqlen_q, bm)
    qk_scale, cap_l2 = _score_args(scale, softcap)
    _prefill_kernel[(H, num_m, num_seqs)](
        q, k_cache, v_cache, out, cu_seqlens_q, context_lens, block_tables, q if sinks is None else sinks,
        qk_scale, cap_l2, num_m,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        GROUP=H // KVH, D=D, BLOCK_D=block_d, BLOCK_M=bm, BLOCK_N=bn, BS=BS, IEEE=q.dtype == torch.float32,
        WINDOW=int(sliding_window or 0), SINKS=sinks is not None, SOFTCAP=softcap is not None, num_warps=warps,
        num_stages=stages,
    )
    return out


# ------------------------------------------------------------------------------------------------------------ decode
@triton.jit
def _decode_kernel(
    q_ptr, k_ptr, v_ptr, kc_ptr, vc_ptr, bt_ptr, ctx_ptr, slot_ptr, pos_ptr, cs_ptr, sink_ptr,
    o_ptr, pacc_ptr, pm_ptr, pl_ptr, qk_scale, cap_l2, qw_ptr, kw_ptr, eps,
    s_qb, s_qh, s_kb, s_kh, s_vb, s_vh, s_ob, s_oh, s_c0, s_c1, s_c2, s_bt,
    H: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr, BS: tl.constexpr, S: tl.constexpr, IEEE: tl.constexpr,
    ROPE: tl.constexpr, ROT: tl.constexpr, PAIRWISE: tl.constexpr, WINDOW: tl.constexpr = 0,
    SINKS: tl.constexpr = False, SOFTCAP: tl.constexpr = False, NORM: tl.constexpr = 0,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    s = tl.program_id(2)
    ctx = tl.load(ctx_ptr + b)
    n_cached = ctx - 1  # the step's own token comes from k_ptr/v_ptr, not the cache
    if WINDOW > 0:  # the query (position ctx - 1) sees keys ctx - W .. ctx - 1: the splits cover only those
        lo = tl.maximum(ctx - WINDOW, 0)
    else:
        lo = ctx * 0
    chunk = tl.cdiv(tl.cdiv(ctx - lo, S), BLOCK_N) * BLOCK_N
    start = lo + s * chunk
    end = tl.minimum(start + chunk, ctx)
    cache_end = tl.minimum(end, n_cached)

    offs_g = tl.arange(0, BLOCK_G)
    gmask = offs_g < GROUP
    heads = kvh * GROUP + offs_g
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < D
    qmask = gmask[:, None] & dmask[None, :]
    q_rows = q_ptr + b.to(tl.int64) * s_qb + heads[:, None] * s_qh
    q = tl.load(q_rows + offs_d[None, :], mask=qmask, other=0.0)
    k_row = k_ptr + b.to(tl.int64) * s_kb + kvh * s_kh
    kn = tl.load(k_row + offs_d, mask=dmask, other=0.0)
    if ROPE:
        pos = tl.load(pos_ptr + b)
        cos, sin, partner = _rope_coeffs(cs_ptr, pos, offs_d, ROT, PAIRWISE)
        qp = tl.load(q_rows + partner[None, :], mask=qmask, other=0.0)
        knp = tl.load(k_row + partner, mask=dmask, other=0.0)
        if NORM > 0:  # per-head QK RMSNorm before the rotation (every split recomputes it: D-wide, no reduction)
            q, qp = _head_rms(q, qp, qw_ptr, offs_d, partner, dmask, eps, D, NORM)
            kn, knp = _head_rms(kn, knp, kw_ptr, offs_d, partner, dmask, eps, D, NORM)
        q = (q.to(tl.float32) * cos[None, :] + qp.to(tl.float32) * sin[None, :]).to(q_ptr.dtype.element_ty)
        kn = (kn.to(tl.float32) * cos + knp.to(tl.float32) * sin).to(k_ptr.dtype.element_ty)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    bt_row = bt_ptr + b.to(tl.int64) * s_bt
    for j0 in range(start, cache_end, BLOCK_N):
        offs_n = j0 + tl.arange(0, BLOCK_N)
        nmask = offs_n < cache_end
        blk = tl.load(bt_row + offs_n // BS, mask=nmask, other=0).to(tl.int64)
        ptrs = (blk * s_c0 + kvh * s_c1 + (offs_n % BS) * s_c2)[:, None] + offs_d[None, :]
        kvmask = nmask[:, None] & dmask[None, :]
        k = tl.load(kc_ptr + ptrs, mask=kvmask, other=0.0)
        if IEEE:
            qk = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            qk = tl.dot(q, tl.trans(k))
        qk = tl.where(nmask[None, :], _scores(qk, qk_scale, cap_l2, SOFTCAP), float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(vc_ptr + ptrs, mask=kvmask, other=0.0)
        if IEEE:
            pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    if (n_cached >= start) & (n_cached < end):  # this split owns the new token: fold it in and write it
        vn = tl.load(v_ptr + b.to(tl.int64) * s_vb + kvh * s_vh + offs_d, mask=dmask, other=0.0)
        s_new = _scores(tl.sum(q.to(tl.float32) * kn.to(tl.float32)[None, :], 1), qk_scale, cap_l2, SOFTCAP)
        m_new = tl.maximum(m_i, s_new)
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s_new - m_new)
        l_i = l_i * alpha + p
        acc = acc * alpha[:, None] + p[:, None] * vn.to(tl.float32)[None, :]
        m_i = m_new
        slot = tl.load(slot_ptr + b).to(tl.int64)
        if slot >= 0:
            dst = (slot // BS) * s_c0 + kvh * s_c1 + (slot % BS) * s_c2 + offs_d
            tl.store(kc_ptr + dst, kn.to(kc_ptr.dtype.element_ty), mask=dmask)
            tl.store(vc_ptr + dst, vn.to(vc_ptr.dtype.element_ty), mask=dmask)

    if S == 1:
        if SINKS:  # the new token is always in this split: m_i is finite
            sink = tl.load(sink_ptr + heads, mask=gmask, other=0.0).to(tl.float32) * 1.4426950408889634
            l_i = l_i + tl.math.exp2(sink - m_i)
        out = acc / l_i[:, None]
        tl.store(o_ptr + b.to(tl.int64) * s_ob + heads[:, None] * s_oh + offs_d[None, :],
                 out.to(o_ptr.dtype.element_ty), mask=qmask)
    else:
        row = (b.to(tl.int64) * H + heads) * S + s  # [BLOCK_G]
        tl.store(pacc_ptr + row[:, None] * BLOCK_D + offs_d[None, :], acc, mask=gmask[:, None])
        tl.store(pm_ptr + row, m_i, mask=gmask)
        tl.store(pl_ptr + row, l_i, mask=gmask)


@triton.jit
def _decode_reduce_kernel(
    o_ptr, pacc_ptr, pm_ptr, pl_ptr, sink_ptr, s_ob, s_oh,
    H: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, S: tl.constexpr, BLOCK_S: tl.constexpr,
    SINKS: tl.constexpr = False,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    smask = offs_s < S
    row = (b.to(tl.int64) * H + h) * S + offs_s
    m = tl.load(pm_ptr + row, mask=smask, other=float("-inf"))
    l = tl.load(pl_ptr + row, mask=smask, other=0.0)
    m_max = tl.max(m, 0)
    w = tl.where(smask & (m > float("-inf")), tl.math.exp2(m - m_max), 0.0)
    offs_d = tl.arange(0, BLOCK_D)
    acc = tl.load(pacc_ptr + row[:, None] * BLOCK_D + offs_d[None, :], mask=smask[:, None], other=0.0)
    den = tl.sum(l * w, 0)
    if SINKS:
        den = den + tl.math.exp2(tl.load(sink_ptr + h).to(tl.float32) * 1.4426950408889634 - m_max)
    out = tl.sum(acc * w[:, None], 0) / den
    tl.store(o_ptr + b.to(tl.int64) * s_ob + h * s_oh + offs_d, out.to(o_ptr.dtype.element_ty), mask=offs_d < D)


def decode_splits(batch: int, num_kv_heads: int, max_context: int, device: torch.device, block_n: int = 64) -> int:
    """Context splits per (sequence, KV head): enough programs to cover the GPU twice, never more than useful.
    (Measured, bench/NOTES-gdn.md "Part 5": no split once the unsplit programs cover every SM gained nothing at
    Llama-3-8B batch 32 -- the unsplit kernel took what the reduce launch had cost.)"""
    sms = num_sms(device.index if device.type == "cuda" else None)
    want = math.ceil(2 * sms / max(1, batch * num_kv_heads))
    return int(max(1, min(want, math.ceil(max_context / block_n), 64)))


def paged_decode(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    block_tables: torch.Tensor, context_lens: torch.Tensor, slot_mapping: torch.Tensor, scale: float,
    num_splits: int | None = None, rope: tuple | None = None, sliding_window: int | None = None,
    sinks: torch.Tensor | None = None, softcap: float | None = None, qk_norm: tuple | None = None,
) -> torch.Tensor:
    """One new token per sequence: ``q [B, H, D]``, its ``k, v [B, KVH, D]`` -> ``[B, H, D]``.

    ``context_lens[b]`` counts the cached tokens plus this one; the new K/V are written at ``slot_mapping[b]`` (-1:
    not written, e.g. CUDA-graph padding rows, which should use ``context_lens = 1``). ``rope = (positions, cos_sin,
    rotary_dim, pairwise)`` rotates q and k inside the kernel (then ``q`` and ``k`` are un-rotated inputs).
    The default ``num_splits`` depends only on shapes (block-table width bounds the context), so it is fixed for a
    captured graph. ``sliding_window`` W: the splits cover only the last W positions (blocks before them are not
    read); ``sinks [H]``: per-head logits joining the softmax denominator (GPT-OSS); ``softcap`` c: scaled scores
    become ``c * tanh(s / c)`` before the mask (Gemma 2); ``qk_norm``: per-head q/k RMSNorm before the rotation, as in
    :func:`write_kv`.
    """
    B, H, D = q.shape
    KVH, BS = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty((B, H, D), dtype=q.dtype, device=q.device)
    if B == 0:
        return out
    block_d = max(16, next_pow2(D))
    block_n = 64 if block_d <= 128 and q.dtype != torch.float32 else 32
    if num_splits is None:
        span = block_tables.shape[1] * BS
        num_splits = decode_splits(B, KVH, span if not sliding_window else min(span, sliding_window + BS), q.device,
                                   block_n)
    S = int(num_splits)
    if S > 1:
        pacc = torch.empty((B * H * S, block_d), dtype=torch.float32, device=q.device)
        pm = torch.empty((B * H * S,), dtype=torch.float32, device=q.device)
        pl = torch.empty((B * H * S,), dtype=torch.float32, device=q.device)
    else:
        pacc = pm = pl = out
    if rope is not None:
        positions, cos_sin, rot, pairwise = rope
    else:
        positions, cos_sin, rot, pairwise = slot_mapping, q, 2, False
    group = H // KVH
    qk_scale, cap_l2 = _score_args(scale, softcap)
    qw, kw, eps, norm = _qk_norm_args(qk_norm, rope, q)
    _decode_kernel[(B, KVH, S)](
        q, k, v, k_cache, v_cache, block_tables, context_lens, slot_mapping, positions, cos_sin,
        q if sinks is None else sinks, out, pacc, pm, pl, qk_scale, cap_l2, qw, kw, eps,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        H=H, GROUP=group, D=D, BLOCK_G=max(16, next_pow2(group)), BLOCK_D=block_d, BLOCK_N=block_n, BS=BS, S=S,
        IEEE=q.dtype == torch.float32, ROPE=rope is not None, ROT=rot, PAIRWISE=bool(pairwise),
        WINDOW=int(sliding_window or 0), SINKS=sinks is not None, SOFTCAP=softcap is not None, NORM=norm,
        num_warps=4, num_stages=2,
    )
    if S > 1:
        _decode_reduce_kernel[(B, H)](
            out, pacc, pm, pl, q if sinks is None else sinks, out.stride(0), out.stride(1),
            H=H, D=D, BLOCK_D=block_d, S=S, BLOCK_S=next_pow2(S), SINKS=sinks is not None, num_warps=4,
        )
    return out
