"""Triton fused MoE on MXFP4 experts (gpt-oss checkpoints kept as released): the weights stay 4-bit in memory and are
expanded in registers, next to the GEMM that uses them.

Layout (``runtime/loader/mxfp4.py``, transformers' packing): ``X_blocks [E, R, K / 32, 16]`` uint8, row ``r`` an
output feature, two E2M1 codes per byte along the input dim (low nibble = even element), and ``X_scales [E, R,
K / 32]`` uint8 E8M0 exponents (value = fp4 * 2^(s - 127)), one per 32 inputs. gpt-oss stores ``gate_up_proj`` with
its 2I output rows interleaved (row 2j = gate j, row 2j + 1 = up j) and ``down_proj`` with H rows over I inputs.
Rows along the output and bytes along the input make each weight tile a plain ``[BLOCK_N, BLOCK_K / 2]`` load; a
byte's low and high codes multiply the even and odd input elements, so a tile's product is two tensor-core dots
``x[:, 0::2] @ lo.T + x[:, 1::2] @ hi.T`` with no interleaving in registers. A code is widened by building its float32
bits (sign, exponent ``e + 126``, one mantissa bit; code 1 = 0.5, code 0 = 0) and scaled by ``2^(s - 127)`` (also
built as float32 bits: no transcendental per element): FP4
values times powers of two are exact in bf16/fp16/fp32 alike, so the widened tile equals the dequantized weight.

Launches: the expert alignment and the deterministic combine of ``runtime/layers/moe/kernels.py`` (imported, not copied:
tokens sorted and padded by expert so every ``BLOCK_M`` rows belong to one expert; the combine sums each token's k
weighted expert outputs in fp32), and here a gate-up kernel (bias, gpt-oss's clamped SwiGLU or SiLU fused) and a
down kernel (bias, routing weight). No host synchronisation and shapes fixed by ``(T, k, E)``: CUDA-graph capturable.

Rounding follows the torch reference run on the dequantized weights (``runtime/layers/moe/ops.py`` ``fused_moe`` with
``F.linear(x, w, b)``): gate/up and the expert output are rounded once after their bias, and the activation rounds
at each of the torch expression's steps (``gate * alpha``, the sigmoid, ``gate * sigmoid``, ``up + 1``, the product).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .kernels import _down_store, _gate_up_store, _row_block, _tile, align, combine, default_config

GROUP = 32  # inputs per E8M0 scale (16 bytes of codes)


@triton.jit
def _fp4_values(codes, scale_exp):
    """uint8 E2M1 codes (low nibble) x E8M0 exponents -> float32 values ``fp4 * 2^(s - 127)`` (exact)."""
    c = codes.to(tl.int32)
    m = c & 7
    e = m >> 1
    f = m & 1
    bits = tl.where(e == 0, f * (126 << 23), ((e + 126) << 23) | (f << 22)) | ((c & 8) << 28)
    # 2^(s - 127) as float32 bits (exponent field s), no transcendental per element; s = 0 is the subnormal 2^-127
    sv = scale_exp.to(tl.int32)
    scale = tl.where(sv == 0, 5.877471754111438e-39, (sv << 23).to(tl.float32, bitcast=True))
    return bits.to(tl.float32, bitcast=True) * scale


@triton.jit
def _mx_tile(w_ptr, s_ptr, rows, nmask, kb, sg, KB, s_wn, s_sn):
    """Weight rows ``rows`` (int64) at byte columns ``kb`` -> (values of even inputs, values of odd inputs), each
    ``[BLOCK_N, BLOCK_K / 2]`` float32."""
    m = nmask[:, None] & (kb < KB)[None, :]
    b = tl.load(w_ptr + rows[:, None] * s_wn + kb[None, :], mask=m, other=0)
    s = tl.load(s_ptr + rows[:, None] * s_sn + sg[None, :], mask=m, other=127)
    return _fp4_values(b & 0x0F, s), _fp4_values(b >> 4, s)


@triton.jit
def _dot(a, w, acc, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(a, tl.trans(w), acc, input_precision="ieee")
    return tl.dot(a, tl.trans(w), acc)


@triton.jit
def _gate_up_mx_kernel(
    x_ptr, w_ptr, s_ptr, b_ptr, out_ptr, sorted_ptr, expert_ids_ptr, npost_ptr,
    N, K, KT, P, s_xm, s_we, s_wn, s_se, s_sn, s_be, s_om, alpha, limit,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HAS_BIAS: tl.constexpr,
    SWIGLU: tl.constexpr, IEEE: tl.constexpr,
):
    pid_n, pid_m, done = _row_block(npost_ptr, BLOCK_M, False)
    if done:
        return
    e, pairs, rmask, offs_n, nmask = _tile(expert_ids_ptr, sorted_ptr, pid_m, pid_n, P, N, BLOCK_M, BLOCK_N)
    tok = pairs // KT
    g_rows = 2 * offs_n.to(tl.int64)  # interleaved rows: gate j at 2j, up j at 2j + 1
    u_rows = g_rows + 1
    HB: tl.constexpr = BLOCK_K // 2
    jb = tl.arange(0, HB)
    we = w_ptr + e * s_we
    se = s_ptr + e * s_se
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    KB = K // 2
    for k0 in range(0, K, BLOCK_K):
        kb = k0 // 2 + jb  # byte columns; inputs 2 kb (low nibble) and 2 kb + 1 (high)
        sg = kb // 16  # 16 bytes per scale group
        kmask = kb < KB
        xm = rmask[:, None] & kmask[None, :]
        a_ev = tl.load(x_ptr + tok[:, None] * s_xm + 2 * kb[None, :], mask=xm, other=0.0)
        a_od = tl.load(x_ptr + tok[:, None] * s_xm + 2 * kb[None, :] + 1, mask=xm, other=0.0)
        lo, hi = _mx_tile(we, se, g_rows, nmask, kb, sg, KB, s_wn, s_sn)
        acc_g = _dot(a_ev, lo.to(a_ev.dtype), acc_g, IEEE)
        acc_g = _dot(a_od, hi.to(a_ev.dtype), acc_g, IEEE)
        lo, hi = _mx_tile(we, se, u_rows, nmask, kb, sg, KB, s_wn, s_sn)
        acc_u = _dot(a_ev, lo.to(a_ev.dtype), acc_u, IEEE)
        acc_u = _dot(a_od, hi.to(a_ev.dtype), acc_u, IEEE)
    # F.linear(x, w, b)'s one rounding, then GPT-OSS's clamped SwiGLU (or SiLU) with torch's roundings
    _gate_up_store(acc_g, acc_u, out_ptr, pairs, rmask, offs_n, nmask, s_om, N, b_ptr, e, s_be, alpha, limit,
                   HAS_BIAS, False, SWIGLU)


@triton.jit
def _down_mx_kernel(
    a_ptr, w_ptr, s_ptr, b_ptr, out_ptr, sorted_ptr, expert_ids_ptr, npost_ptr, tw_ptr,
    N, K, KT, P, s_am, s_we, s_wn, s_se, s_sn, s_be, s_om, s_tw,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HAS_BIAS: tl.constexpr,
    IEEE: tl.constexpr,
):
    pid_n, pid_m, done = _row_block(npost_ptr, BLOCK_M, False)
    if done:
        return
    e, pairs, rmask, offs_n, nmask = _tile(expert_ids_ptr, sorted_ptr, pid_m, pid_n, P, N, BLOCK_M, BLOCK_N)
    rows = offs_n.to(tl.int64)
    HB: tl.constexpr = BLOCK_K // 2
    jb = tl.arange(0, HB)
    we = w_ptr + e * s_we
    se = s_ptr + e * s_se
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    KB = K // 2
    for k0 in range(0, K, BLOCK_K):
        kb = k0 // 2 + jb
        kmask = kb < KB
        am = rmask[:, None] & kmask[None, :]
        a_ev = tl.load(a_ptr + pairs[:, None] * s_am + 2 * kb[None, :], mask=am, other=0.0)
        a_od = tl.load(a_ptr + pairs[:, None] * s_am + 2 * kb[None, :] + 1, mask=am, other=0.0)
        lo, hi = _mx_tile(we, se, rows, nmask, kb, kb // 16, KB, s_wn, s_sn)
        acc = _dot(a_ev, lo.to(a_ev.dtype), acc, IEEE)
        acc = _dot(a_od, hi.to(a_ev.dtype), acc, IEEE)
    # every slot routed (no shared experts here): the weight read for each valid pair
    _down_store(acc, a_ptr.dtype.element_ty, out_ptr, pairs, rmask, offs_n, nmask, s_om, tw_ptr, s_tw, KT, KT,
                b_ptr, e, s_be, HAS_BIAS, False)


def supported(hidden: torch.Tensor, activation: str, w13_blocks: torch.Tensor) -> bool:
    """Model dtypes of the kernels, the activations they fuse, and whole scale groups (K a multiple of 32)."""
    return (hidden.dtype in (torch.bfloat16, torch.float16, torch.float32) and activation in ("clamped_swiglu", "silu")
            and w13_blocks.dtype == torch.uint8 and hidden.shape[-1] % GROUP == 0 and hidden.shape[-1] >= 64)


def _config(T: int, k: int, L: int, dtype: torch.dtype) -> dict:
    """The bf16 MoE's block table (``moe.default_config``: BLOCK_M by rows per expert, narrow column blocks for
    decode), with BLOCK_K counted in inputs (half as many bytes of codes) and at least 64 (two dots of K >= 32)."""
    cfg = default_config(T, k, L, dtype)
    fix = lambda c: (c[0], max(64, c[1]), c[2], c[3])  # noqa: E731
    return {"BLOCK_M": cfg["BLOCK_M"], "up": fix(cfg["up"]), "down": fix(cfg["down"])}


def fused_moe_mxfp4(
    hidden: torch.Tensor, w13_blocks: torch.Tensor, w13_scales: torch.Tensor, w2_blocks: torch.Tensor,
    w2_scales: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, *, activation: str = "clamped_swiglu",
    alpha: float = 1.702, limit: float = 7.0, w13_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None, expert_offset: int = 0, config: dict | None = None,
) -> torch.Tensor:
    """``sum_j w[t, j] * expert_{ids[t, j]}(hidden[t])`` over this rank's experts with MXFP4 weights -> ``[T, H]``.

    ``w13_blocks [L, 2I, H / 32, 16]`` / ``w13_scales [L, 2I, H / 32]`` (rows gate/up interleaved, as gpt-oss stores
    ``gate_up_proj``), ``w2_blocks [L, H, I / 32, 16]`` / ``w2_scales [L, H, I / 32]``; ``w13_bias [L, 2I]`` gate
    columns then up columns (``FusedMoE``'s stacked bias), ``w2_bias [L, H]``. ``topk_ids`` are global expert ids; this
    rank holds ``[expert_offset, expert_offset + L)``, other experts' pairs are skipped (their rank adds them).
    """
    T, H = hidden.shape
    L, R = w13_blocks.shape[:2]
    I = R // 2
    k = topk_ids.shape[1]
    P = T * k
    out = torch.empty((T, H), dtype=hidden.dtype, device=hidden.device)
    if T == 0:
        return out
    hidden = hidden.contiguous()
    topk_ids = topk_ids.contiguous()
    topk_weights = topk_weights.contiguous()
    w13 = w13_blocks.reshape(L, R, -1)  # [L, 2I, H / 2] bytes
    s13 = w13_scales.reshape(L, R, -1)
    w2 = w2_blocks.reshape(L, H, -1)  # [L, H, I / 2]
    s2 = w2_scales.reshape(L, H, -1)
    if w13.shape[2] * 2 != H or w2.shape[2] * 2 != I or s13.shape[2] * GROUP != H or s2.shape[2] * GROUP != I:
        raise ValueError(f"fused_moe_mxfp4: hidden [{T}, {H}], w13_blocks {tuple(w13_blocks.shape)}, w2_blocks "
                         f"{tuple(w2_blocks.shape)} do not describe [L, 2I, H] and [L, H, I] experts")
    cfg = config or _config(T, k, L, hidden.dtype)
    BM = cfg["BLOCK_M"]
    dev = hidden.device
    sorted_ids, expert_ids, npost, max_blocks = align(topk_ids, P, k, k, expert_offset, L, 0, BM, chain=False)
    ieee = hidden.dtype == torch.float32
    inter = torch.empty((P, I), dtype=hidden.dtype, device=dev)
    bn, bk, nw, ns = cfg["up"]
    b13 = w13_bias if w13_bias is not None else inter
    _gate_up_mx_kernel[(triton.cdiv(I, bn), max_blocks)](
        hidden, w13, s13, b13, inter, sorted_ids, expert_ids, npost,
        I, H, k, P, hidden.stride(0), w13.stride(0), w13.stride(1), s13.stride(0), s13.stride(1),
        b13.stride(0) if w13_bias is not None else 0, inter.stride(0), float(alpha), float(limit),
        BLOCK_M=BM, BLOCK_N=bn, BLOCK_K=bk, HAS_BIAS=w13_bias is not None, SWIGLU=activation == "clamped_swiglu",
        IEEE=ieee, num_warps=nw, num_stages=ns,
    )
    pair_out = torch.empty((P, H), dtype=torch.promote_types(hidden.dtype, topk_weights.dtype), device=dev)
    bn, bk, nw, ns = cfg["down"]
    b2 = w2_bias if w2_bias is not None else inter
    _down_mx_kernel[(triton.cdiv(H, bn), max_blocks)](
        inter, w2, s2, b2, pair_out, sorted_ids, expert_ids, npost, topk_weights,
        H, I, k, P, inter.stride(0), w2.stride(0), w2.stride(1), s2.stride(0), s2.stride(1),
        b2.stride(0) if w2_bias is not None else 0, pair_out.stride(0), topk_weights.stride(0),
        BLOCK_M=BM, BLOCK_N=bn, BLOCK_K=bk, HAS_BIAS=w2_bias is not None, IEEE=ieee, num_warps=nw, num_stages=ns,
    )
    return combine(pair_out, topk_ids, out, k, k, expert_offset, L, chain=False)
