"""Triton GEMM on FP8 block-scaled weights (DeepSeek-V3 / Qwen3-FP8 checkpoints, ``runtime/layers/fp8.py``'s format).

``y [M, N] = x [M, K] @ W^T`` with ``W = W_fp8 [N, K] * scale_inv`` per ``(bn, bk)`` block (128 x 128 in every released
checkpoint; edge blocks partial). The weight stays FP8 in memory -- half the bytes of bf16, which is what a decode
step is bound by -- and is widened to the activation dtype in registers. Each ``BLOCK_K = bk`` slice of the reduction
lies in one scale column and each ``BLOCK_N`` (a divisor of ``bn``) in one scale row, so a tile's product is scaled by
one scalar after the tensor-core dot: ``acc += (x_tile @ w_tile^T) * scale[n_blk, k_blk]`` in float32, which is the
dequantized product without rounding the dequantized weight to bf16 first.

Small ``M`` (decode) has few output tiles: ``split_k`` programs share the reduction and a second pass sums their
float32 partials. Host choices depend only on shapes, so a call is capturable in a CUDA graph.

Whether this beats dequantize-at-load (a bf16 weight and the skinny bf16 GEMMs) is a measurement:
``python -m bench.fp8_gemm`` times both at DeepSeek-V3's shapes.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import num_sms


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
