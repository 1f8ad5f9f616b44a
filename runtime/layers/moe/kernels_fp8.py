"""Triton fused MoE on FP8 block-scaled experts (DeepSeek-V3's release format kept on the GPU): the expert weights stay
float8_e4m3fn in memory with one float32 ``scale_inv`` per ``(bn, bk)`` block, half the bytes of bf16, and are widened
in registers next to the tensor-core dot.

Layout: ``FusedMoE``'s stacked experts, ``w13 [L + S, 2I, H]`` (gate rows, then up rows) with ``s13 [L + S, 2I / bn,
H / bk]`` and ``w2 [L + S, H, I]`` with ``s2 [L + S, H / bn, I / bk]`` (``runtime/layers/moe/fp8.py`` builds them).
``BLOCK_K = bk`` and ``BLOCK_N`` divides ``bn`` (and ``I`` is a multiple of ``bn``), so each tile's product is scaled
by one scalar after the dot, in float32: the dequantized product without rounding a dequantized weight first (as
``runtime/ops/gpu/fp8.py``'s dense GEMM).

Launches: moe.py's expert alignment and deterministic combine (imported: tokens sorted and padded by expert, shared
slots appended with weight 1, expert-parallel ranges), a gate-up kernel with SiLU fused and a down kernel with the
routing weights. No host synchronisation, shapes fixed by ``(T, k, E)``: CUDA-graph capturable. Rounding follows
``moe.py``'s sorted path (gate/up and the expert output rounded to the model dtype, the activation before the multiply,
the weighted product in ``promote(model dtype, weight dtype)``, the k products summed in fp32 and rounded once).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .kernels import _down_store, _gate_up_store, _row_block, _tile, align, combine, default_config, slot_sizes
from .kernels_mxfp4 import _dot


@triton.jit
def _gate_up_fp8_kernel(
    x_ptr, w_ptr, s_ptr, out_ptr, sorted_ptr, expert_ids_ptr, npost_ptr,
    N, K, KT, P, s_xm, s_we, s_wn, s_se, s_sn, s_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, QN: tl.constexpr, IEEE: tl.constexpr,
):
    pid_n, pid_m, done = _row_block(npost_ptr, BLOCK_M, False)
    if done:
        return
    e, pairs, rmask, offs_n, nmask = _tile(expert_ids_ptr, sorted_ptr, pid_m, pid_n, P, N, BLOCK_M, BLOCK_N)
    tok = pairs // KT
    offs_k = tl.arange(0, BLOCK_K)
    g_ptrs = w_ptr + e * s_we + offs_n.to(tl.int64)[:, None] * s_wn + offs_k[None, :]
    u_ptrs = g_ptrs + N * s_wn  # up rows follow the I gate rows
    sg = s_ptr + e * s_se + ((pid_n * BLOCK_N) // QN) * s_sn  # this tile's scale row (BLOCK_N divides QN)
    su = s_ptr + e * s_se + ((N + pid_n * BLOCK_N) // QN) * s_sn  # I is a multiple of QN
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        kmask = kb * BLOCK_K + offs_k < K
        a = tl.load(x_ptr + tok[:, None] * s_xm + kb * BLOCK_K + offs_k[None, :], mask=rmask[:, None] & kmask[None, :],
                    other=0.0)
        m = nmask[:, None] & kmask[None, :]
        wg = tl.load(g_ptrs, mask=m, other=0.0).to(a.dtype)
        wu = tl.load(u_ptrs, mask=m, other=0.0).to(a.dtype)
        acc_g += _dot(a, wg, tl.zeros((BLOCK_M, BLOCK_N), tl.float32), IEEE) * tl.load(sg + kb)
        acc_u += _dot(a, wu, tl.zeros((BLOCK_M, BLOCK_N), tl.float32), IEEE) * tl.load(su + kb)
        g_ptrs += BLOCK_K
        u_ptrs += BLOCK_K
    # SiLU, no bias (out_ptr stands in for the bias pointer, alpha / limit unused): F.linear's roundings, silu(gate)
    # rounded before the multiply
    _gate_up_store(acc_g, acc_u, out_ptr, pairs, rmask, offs_n, nmask, s_om, N, out_ptr, e, 0, 1.0, 1.0,
                   False, False, False)


@triton.jit
def _down_fp8_kernel(
    a_ptr, w_ptr, s_ptr, out_ptr, sorted_ptr, expert_ids_ptr, npost_ptr, tw_ptr,
    N, K, KT, K_ROUTED, P, s_am, s_we, s_wn, s_se, s_sn, s_om, s_tw,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, QN: tl.constexpr, IEEE: tl.constexpr,
):
    pid_n, pid_m, done = _row_block(npost_ptr, BLOCK_M, False)
    if done:
        return
    e, pairs, rmask, offs_n, nmask = _tile(expert_ids_ptr, sorted_ptr, pid_m, pid_n, P, N, BLOCK_M, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + e * s_we + offs_n.to(tl.int64)[:, None] * s_wn + offs_k[None, :]
    srow = s_ptr + e * s_se + ((pid_n * BLOCK_N) // QN) * s_sn
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        kmask = kb * BLOCK_K + offs_k < K
        a = tl.load(a_ptr + pairs[:, None] * s_am + kb * BLOCK_K + offs_k[None, :],
                    mask=rmask[:, None] & kmask[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=nmask[:, None] & kmask[None, :], other=0.0).to(a.dtype)
        acc += _dot(a, w, tl.zeros((BLOCK_M, BLOCK_N), tl.float32), IEEE) * tl.load(srow + kb)
        w_ptrs += BLOCK_K
    _down_store(acc, a_ptr.dtype.element_ty, out_ptr, pairs, rmask, offs_n, nmask, s_om, tw_ptr, s_tw, KT, K_ROUTED,
                out_ptr, e, 0, False, True)  # no bias (out_ptr a placeholder); shared slots weigh 1


def supported(hidden: torch.Tensor, activation: str, w13: torch.Tensor, block: tuple[int, int]) -> bool:
    """Model dtypes of the kernels, SiLU (DeepSeek / Qwen3 FP8 experts), FP8 weights, power-of-two blocks with the
    intermediate size a whole number of row blocks (the up rows' scale row is ``(I + n) // bn``)."""
    bn, bk = block
    I = w13.shape[1] // 2
    return (hidden.dtype in (torch.bfloat16, torch.float16, torch.float32) and activation == "silu"
            and w13.dtype == torch.float8_e4m3fn and bk >= 16 and bk & (bk - 1) == 0 and bn & (bn - 1) == 0
            and I % bn == 0)


def fused_moe_fp8(
    hidden: torch.Tensor, w13: torch.Tensor, s13: torch.Tensor, w2: torch.Tensor, s2: torch.Tensor,
    topk_weights: torch.Tensor, topk_ids: torch.Tensor, block: tuple[int, int], *, expert_offset: int = 0,
    num_local_experts: int | None = None, num_shared: int = 0,
) -> torch.Tensor:
    """``sum_j w[t, j] * expert_{ids[t, j]}(hidden[t])`` (SiLU experts) over this rank's experts with FP8 block-scaled
    weights -> ``[T, H]``; the arguments of ``moe.fused_moe`` plus the scales and the ``(bn, bk)`` block."""
    T, H = hidden.shape
    k, S, L, I, KT, P = slot_sizes(hidden, w13, topk_ids, num_shared, num_local_experts)
    bn, bk = block
    out = torch.empty((T, H), dtype=hidden.dtype, device=hidden.device)
    if T == 0:
        return out
    hidden, topk_ids, topk_weights = hidden.contiguous(), topk_ids.contiguous(), topk_weights.contiguous()
    cfg = default_config(T, KT, L + S, hidden.dtype)
    BM = cfg["BLOCK_M"]
    dev = hidden.device
    sorted_ids, expert_ids, npost, max_blocks = align(topk_ids, P, KT, k, expert_offset, L, S, BM, chain=False)
    ieee = hidden.dtype == torch.float32
    inter = torch.empty((P, I), dtype=hidden.dtype, device=dev)
    bn_up = min(cfg["up"][0], bn)  # a divisor of the scale block's rows (both powers of two)
    _gate_up_fp8_kernel[(triton.cdiv(I, bn_up), max_blocks)](
        hidden, w13, s13, inter, sorted_ids, expert_ids, npost,
        I, H, KT, P, hidden.stride(0), w13.stride(0), w13.stride(1), s13.stride(0), s13.stride(1), inter.stride(0),
        BLOCK_M=BM, BLOCK_N=bn_up, BLOCK_K=bk, QN=bn, IEEE=ieee, num_warps=cfg["up"][2], num_stages=cfg["up"][3],
    )
    pair_out = torch.empty((P, H), dtype=torch.promote_types(hidden.dtype, topk_weights.dtype), device=dev)
    bn_down = min(cfg["down"][0], bn)
    _down_fp8_kernel[(triton.cdiv(H, bn_down), max_blocks)](
        inter, w2, s2, pair_out, sorted_ids, expert_ids, npost, topk_weights,
        H, I, KT, k, P, inter.stride(0), w2.stride(0), w2.stride(1), s2.stride(0), s2.stride(1), pair_out.stride(0),
        topk_weights.stride(0),
        BLOCK_M=BM, BLOCK_N=bn_down, BLOCK_K=bk, QN=bn, IEEE=ieee, num_warps=cfg["down"][2],
        num_stages=cfg["down"][3],
    )
    return combine(pair_out, topk_ids, out, KT, k, expert_offset, L, chain=False)
