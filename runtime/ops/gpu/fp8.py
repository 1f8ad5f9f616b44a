"""Triton GEMM on FP8 block-scaled weights (DeepSeek-V3 / Qwen3-FP8 checkpoints, ``runtime/layers/fp8.py``'s format).

``y [M, N] = x [M, K] @ W^T`` with ``W = W_fp8 [N, K] * scale_inv`` per ``(bn, bk)`` block (128 x 128 in every released
checkpoint; edge blocks partial). The weight stays FP8 in memory -- half the bytes of bf16, which is what a decode
step is bound by -- and is widened to the activation dtype in registers. Each ``BLOCK_K = bk`` slice of the reduction
lies in one scale column and each ``BLOCK_N`` (a divisor of ``bn``) in one scale row, so a tile's product is scaled by
one scalar after the tensor-core dot: ``acc += (x_tile @ w_tile^T) * scale[n_blk, k_blk]`` in float32, which is the
dequantized product without rounding the dequantized weight to bf16 first.

Small ``M`` (decode) has few output tiles: ``split_k`` programs share the reduction and a second pass sums their
float32 partials. Host choices depend only on shapes, so a call is capturable in a CUDA graph.

``M = 1`` (batch-1 decode) takes a GEMV instead (:func:`fp8_gemv`): no tensor-core tile (the GEMM pads the one row to
16), each program streams ``[BLOCK_N, bk]`` FP8 tiles of one scale row, and the split-K partials are summed in the
same launch by the last program to arrive (an acq_rel counter it resets, as ``linear.py``'s bf16 GEMV does), instead
of the GEMM's partial buffer + ``sum`` + copy (three launches per linear). Measured on the H200 before it: the FP8-kept
DeepSeek-V3 shape decoded 681 tok/s at batch 1 against 719 with the weights dequantized to bf16, although it reads
half the linear and expert bytes (bench/results/h200-deepseek-v3-fp8-{keep,dequantize}.json).

Whether this beats dequantize-at-load (a bf16 weight and the skinny bf16 GEMMs) is a measurement:
``python -m bench.fp8_gemm`` times both at DeepSeek-V3's shapes.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import num_sms, pdl


@triton.jit
def _fp8_block_gemm_kernel(
    x_ptr, w_ptr, s_ptr, b_ptr, o_ptr, M, N, K, s_xm, s_wn, s_sn, s_om, s_split, k_blocks_per_split,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, QN: tl.constexpr, HAS_BIAS: tl.constexpr,
    DIRECT: tl.constexpr, IEEE: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    mm = rm < M
    nm = rn < N
    srow = s_ptr + ((pid_n * BN) // QN) * s_sn  # one scale row per BLOCK_N tile (BN divides QN)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    kb0 = pid_k * k_blocks_per_split
    for i in range(0, k_blocks_per_split):
        kb = kb0 + i
        ks = kb * BK + rk
        km = ks < K
        x = tl.load(x_ptr + rm[:, None].to(tl.int64) * s_xm + ks[None, :], mask=mm[:, None] & km[None, :], other=0.0)
        w = tl.load(w_ptr + rn[:, None].to(tl.int64) * s_wn + ks[None, :], mask=nm[:, None] & km[None, :], other=0.0)
        if IEEE:  # float32 activations: no tf32 rounding
            d = tl.dot(x, tl.trans(w.to(x.dtype)), input_precision="ieee")
        else:
            d = tl.dot(x, tl.trans(w.to(x.dtype)))
        s = tl.load(srow + kb, mask=kb * BK < K, other=0.0)
        acc += d * s
    if DIRECT:  # no split: the output itself (one variant per flag, not per split count: fewer compiles)
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=nm, other=0.0).to(tl.float32)[None, :]
        tl.store(o_ptr + rm[:, None].to(tl.int64) * s_om + rn[None, :], acc.to(o_ptr.dtype.element_ty),
                 mask=mm[:, None] & nm[None, :])
    else:  # float32 partials [split, M, N], summed by the caller
        tl.store(o_ptr + pid_k * s_split + rm[:, None].to(tl.int64) * s_om + rn[None, :], acc,
                 mask=mm[:, None] & nm[None, :])


@triton.jit
def _fp8_gemv_kernel(
    x_ptr, w_ptr, s_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr, N, K, s_wn, s_sn, k_blocks_per_split,
    BN: tl.constexpr, BK: tl.constexpr, QN: tl.constexpr, SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr,
    PDL: tl.constexpr,
):
    """One row: ``y[n] = sum_k x[k] * w[n, k] * scale[n // QN, k // BK]``; program (n tile, k split)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pdl.wait(PDL)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    nm = rn < N
    srow = s_ptr + ((pid_n * BN) // QN) * s_sn  # BN divides QN: one scale row per tile
    w_row = w_ptr + rn.to(tl.int64)[:, None] * s_wn
    acc = tl.zeros([BN, BK], dtype=tl.float32)
    kb0 = pid_k * k_blocks_per_split
    for i in range(0, k_blocks_per_split):
        kb = kb0 + i
        ks = kb * BK + rk
        km = ks < K
        w = tl.load(w_row + ks[None, :], mask=nm[:, None] & km[None, :], other=0.0, eviction_policy="evict_first")
        x = tl.load(x_ptr + ks, mask=km, other=0.0).to(tl.float32)
        sc = tl.load(srow + kb, mask=kb * BK < K, other=0.0)
        # the scale multiplies the float32 products, never a bf16-rounded dequantized weight (as the GEMM's acc)
        acc += w.to(tl.float32) * (x * sc)[None, :]
    part = tl.sum(acc, 1)
    if SPLIT_K == 1:
        if HAS_BIAS:
            part += tl.load(b_ptr + rn, mask=nm, other=0.0).to(tl.float32)
        tl.store(y_ptr + rn, part.to(y_ptr.dtype.element_ty), mask=nm)
    else:
        tl.store(ws_ptr + pid_k * N + rn, part, mask=nm)
        done = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel")
        if done == SPLIT_K - 1:  # the last program of this n tile: every partial is visible (acq_rel)
            total = tl.zeros([BN], tl.float32)
            for sp in range(SPLIT_K):
                total += tl.load(ws_ptr + sp * N + rn, mask=nm, other=0.0, cache_modifier=".cg")
            if HAS_BIAS:
                total += tl.load(b_ptr + rn, mask=nm, other=0.0).to(tl.float32)
            tl.store(y_ptr + rn, total.to(y_ptr.dtype.element_ty), mask=nm)
            tl.atomic_xchg(cnt_ptr + pid_n, 0)  # left at zero: the next call (or graph replay) starts clean


_GEMV_COUNTERS: dict[tuple, torch.Tensor] = {}


def gemv_config(N: int, K: int, block: tuple[int, int], device_index: int | None) -> tuple[int, int, int]:
    """(BN, split_k, num_warps) for one row: 32-row tiles (a divisor of the scale block), enough K splits for about
    four programs per SM -- a GEMV is a pure weight stream, and a 4 KB FP8 tile per iteration needs many programs in
    flight to keep HBM busy."""
    bn_q, bk = block
    BN = min(bn_q, 32)
    tiles = triton.cdiv(N, BN)
    k_blocks = triton.cdiv(K, bk)
    split = max(1, min(k_blocks, 16, triton.cdiv(4 * num_sms(device_index), tiles)))
    return BN, split, 4


# Candidates of the timed choice: the table's pick plus the winners of bench/fp8_gemm.py's 45-config sweep at
# DeepSeek-V3's shapes on the H200 (h200-fp8-gemm.json: small N and long K liked 64-row tiles, 16 splits, 8 warps;
# the 7168-row outputs 16-row tiles, 4 splits, 2 warps; no single rule was within 1.2x everywhere).
GEMV_CANDIDATES = ((64, 16, 8), (32, 8, 4), (32, 4, 4), (16, 4, 2), (32, 4, 2), (64, 1, 8), (64, 1, 4))
_GEMV_CHOICE: dict[tuple, tuple[int, int, int]] = {}
GEMV_TIMINGS: dict[tuple, dict[str, float]] = {}  # (N, K, block, dtype, bias) -> {config: ms}, for reports


def _pick_gemv(key, x1, weight, scale, block, bias) -> tuple[int, int, int]:
    """The fastest config for this weight shape, timed once from CUDA-graph replays over weight copies (as
    ``linear.py`` picks its GEMM kernels), outside any capture: decode graphs warm up before they capture."""
    from .linear import _time, weight_copies

    N, K = weight.shape
    bn_q, bk = block
    table = gemv_config(N, K, block, x1.device.index)
    k_blocks = triton.cdiv(K, bk)
    cands = [table] + [c for c in GEMV_CANDIDATES if c != table and bn_q % c[0] == 0 and c[1] <= k_blocks]
    copies = weight_copies(weight)
    times = {}
    for c in cands:
        try:
            times[c] = _time(lambda i, c=c: fp8_gemv(x1, copies[i], scale, block, bias, config=c), len(copies))
        except Exception:  # e.g. out of resources for this config: not a candidate
            times[c] = float("inf")
    del copies
    GEMV_TIMINGS[key] = {str(c): t for c, t in times.items()}
    best = min(times, key=times.get)
    return best if times[best] < 0.97 * times[table] else table  # near-ties keep the table's choice


def fp8_gemv(x1: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int],
             bias: torch.Tensor | None = None, config: tuple[int, int, int] | None = None) -> torch.Tensor:
    """``x1 [1, K]`` times the FP8 ``weight [N, K]`` with float32 ``scale [ceil(N/bn), ceil(K/bk)]`` -> ``[1, N]``.
    ``config`` ``(BN, split_k, num_warps)`` overrides the choice; otherwise on a GPU the fastest of a few configs is
    timed once per shape (:func:`_pick_gemv`; the table :func:`gemv_config` inside a capture that comes first,
    on the CPU and in Triton's interpreter)."""
    N, K = weight.shape
    bn_q, bk = block
    if config is None and x1.is_cuda:
        key = (N, K, tuple(block), x1.dtype, bias is not None)
        config = _GEMV_CHOICE.get(key)
        if config is None and not torch.cuda.is_current_stream_capturing():
            config = _GEMV_CHOICE[key] = _pick_gemv(key, x1, weight, scale, block, bias)
    BN, split, warps = config or gemv_config(N, K, block, x1.device.index if x1.is_cuda else None)
    if bn_q % BN:
        raise ValueError(f"fp8_gemv: BN {BN} must divide the scale block's {bn_q} rows")
    k_blocks = triton.cdiv(K, bk)
    per = triton.cdiv(k_blocks, split)
    split = triton.cdiv(k_blocks, per)
    tiles = triton.cdiv(N, BN)
    y = torch.empty((1, N), dtype=x1.dtype, device=x1.device)
    key = (x1.device, tiles)
    cnt = _GEMV_COUNTERS.get(key)
    if cnt is None:
        cnt = _GEMV_COUNTERS[key] = torch.zeros(tiles, dtype=torch.int32, device=x1.device)
    ws = torch.empty((split, N), dtype=torch.float32, device=x1.device) if split > 1 else y
    _fp8_gemv_kernel[(tiles, split)](
        x1, weight, scale, bias if bias is not None else y, y, ws, cnt, N, K, weight.stride(0), scale.stride(0), per,
        BN=BN, BK=bk, QN=bn_q, SPLIT_K=split, HAS_BIAS=bias is not None, num_warps=warps, num_stages=3,
        **pdl.launch(x1.device))
    return y


def table_config(M: int, N: int, K: int, block: tuple[int, int], device_index: int | None) -> tuple[int, int, int]:
    """(BM, BN, split_k) from the shape alone: tiles of 16-64 rows, 32-128 columns (a divisor of the scale block), and
    enough K splits for about four programs per SM when M is small. A decode GEMM is a weight stream: each program
    keeps only ``num_stages`` tiles of 4-8 KB in flight, so one or two programs per SM (o_proj at M = 1: 224 tiles on
    132 SMs) leave HBM under-used; the float32 partials of a split cost ``split * M * N * 4`` bytes, small next to
    the weight."""
    bn_q, bk = block
    BM = 16 if M <= 16 else (32 if M <= 32 else 64)
    BN = min(bn_q, 32 if M <= 16 else 64)
    while bn_q % BN:
        BN //= 2
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    k_blocks = triton.cdiv(K, bk)
    split = max(1, min(k_blocks, -(-4 * num_sms(device_index) // max(1, tiles)) if tiles < 2 * num_sms(device_index)
                       else 1, 16))
    return BM, BN, split


def block_fp8_linear(x: torch.Tensor, weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int] = (128, 128),
                     bias: torch.Tensor | None = None, split_k: int | None = None,
                     config: tuple[int, int, int, int, int] | None = None) -> torch.Tensor:
    """``x [..., K]`` (bf16/fp16/fp32) times the FP8 weight ``[N, K]`` with ``scale_inv [ceil(N/bn), ceil(K/bk)]``
    -> ``[..., N]`` in x's dtype. ``config`` ``(BM, BN, split_k, num_warps, num_stages)`` overrides the table (the
    sweep of ``bench/fp8_gemm.py``); BN must divide the scale block's rows."""
    K = x.shape[-1]
    N = weight.shape[0]
    bn_q, bk = block
    if weight.shape[1] != K or tuple(scale_inv.shape) != (triton.cdiv(N, bn_q), triton.cdiv(K, bk)):
        raise ValueError(f"block_fp8_linear: x [..., {K}], weight {tuple(weight.shape)}, scale_inv "
                         f"{tuple(scale_inv.shape)} do not match blocks {block}")
    if bk < 16 or bk & (bk - 1) or bn_q & (bn_q - 1):
        raise ValueError(f"block_fp8_linear: block sizes {block} must be powers of two, bk >= 16")
    x2 = x.reshape(-1, K)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    M = x2.shape[0]
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    s = scale_inv.float().contiguous()
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0:
        return out.view(*x.shape[:-1], N)
    if M == 1 and config is None and split_k is None:
        return fp8_gemv(x2, w, s, block, bias).view(*x.shape[:-1], N)
    warps, stages = 4, 3
    if config is not None:
        BM, BN, split, warps, stages = config
        if bn_q % BN:
            raise ValueError(f"block_fp8_linear: BN {BN} must divide the scale block's {bn_q} rows")
    else:
        BM, BN, split = table_config(M, N, K, block, x.device.index if x.is_cuda else None)
    if split_k is not None:
        split = max(1, int(split_k))
    k_blocks = triton.cdiv(K, bk)
    per = triton.cdiv(k_blocks, split)
    split = triton.cdiv(k_blocks, per)
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN), split)
    if split == 1:
        _fp8_block_gemm_kernel[grid](
            x2, w, s, bias if bias is not None else out, out, M, N, K, x2.stride(0), w.stride(0), s.stride(0),
            out.stride(0), 0, per, BM=BM, BN=BN, BK=bk, QN=bn_q, HAS_BIAS=bias is not None, DIRECT=True,
            IEEE=x.dtype == torch.float32, num_warps=warps, num_stages=stages)
    else:
        part = torch.empty((split, M, N), dtype=torch.float32, device=x.device)
        _fp8_block_gemm_kernel[grid](
            x2, w, s, out, part, M, N, K, x2.stride(0), w.stride(0), s.stride(0), part.stride(1), part.stride(0),
            per, BM=BM, BN=BN, BK=bk, QN=bn_q, HAS_BIAS=False, DIRECT=False,
            IEEE=x.dtype == torch.float32, num_warps=warps, num_stages=stages)
        acc = part.sum(0)
        if bias is not None:
            acc = acc + bias.float()
        out.copy_(acc)
    return out.view(*x.shape[:-1], N)
