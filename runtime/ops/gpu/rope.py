"""Triton RoPE: rotates q and k of every token in one launch (both styles, partial rotary dims), from the float32
cos/sin table of ``runtime/ops/rope.py``. The rotation is computed in float32 and rounded once."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import next_pow2


@triton.jit
def _rope_coeffs(cs_ptr, pos, offs_d, ROT: tl.constexpr, PAIRWISE: tl.constexpr):
    """cos, signed sin and partner index of each dim for position ``pos`` (dims >= ROT pass through)."""
    HALF: tl.constexpr = ROT // 2
    in_rot = offs_d < ROT
    if PAIRWISE:
        fi = offs_d // 2
        partner = offs_d ^ 1
        sign = tl.where(offs_d % 2 == 0, -1.0, 1.0)
    else:
        fi = offs_d % HALF
        partner = tl.where(offs_d < HALF, offs_d + HALF, offs_d - HALF)
        sign = tl.where(offs_d < HALF, -1.0, 1.0)
    base = cs_ptr + pos.to(tl.int64) * ROT
    cos = tl.load(base + fi, mask=in_rot, other=1.0)
    sin = tl.load(base + HALF + fi, mask=in_rot, other=0.0) * sign
    partner = tl.where(in_rot, partner, offs_d)
    return cos, sin, partner


@triton.jit
def _rope_qk_kernel(
    q_ptr, k_ptr, qo_ptr, ko_ptr, pos_ptr, cs_ptr,
    s_qt, s_qh, s_kt, s_kh, s_qot, s_qoh, s_kot, s_koh,
    H: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_KVH: tl.constexpr,
    BLOCK_D: tl.constexpr, ROT: tl.constexpr, PAIRWISE: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + t)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < D
    cos, sin, partner = _rope_coeffs(cs_ptr, pos, offs_d, ROT, PAIRWISE)
    offs_h = tl.arange(0, BLOCK_H)
    m = (offs_h < H)[:, None] & dmask[None, :]
    rows = q_ptr + t * s_qt + offs_h[:, None] * s_qh
    x = tl.load(rows + offs_d[None, :], mask=m, other=0.0).to(tl.float32)
    xp = tl.load(rows + partner[None, :], mask=m, other=0.0).to(tl.float32)
    y = x * cos[None, :] + xp * sin[None, :]
    tl.store(qo_ptr + t * s_qot + offs_h[:, None] * s_qoh + offs_d[None, :], y.to(qo_ptr.dtype.element_ty), mask=m)
    offs_kh = tl.arange(0, BLOCK_KVH)
    mk = (offs_kh < KVH)[:, None] & dmask[None, :]
    rows = k_ptr + t * s_kt + offs_kh[:, None] * s_kh
    x = tl.load(rows + offs_d[None, :], mask=mk, other=0.0).to(tl.float32)
    xp = tl.load(rows + partner[None, :], mask=mk, other=0.0).to(tl.float32)
    y = x * cos[None, :] + xp * sin[None, :]
    tl.store(ko_ptr + t * s_kot + offs_kh[:, None] * s_koh + offs_d[None, :], y.to(ko_ptr.dtype.element_ty), mask=mk)


def rope_qk(
    q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor, positions: torch.Tensor, rotary_dim: int, style: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``q [T, H, D]``, ``k [T, KVH, D]`` -> rotated copies (same as :func:`modelgen.runtime.ops.rope.apply_rope` on each)."""
    if style not in ("rotate_half", "pairwise"):
        raise ValueError(f"unknown rope style {style!r}")
    T, H, D = q.shape
    KVH = k.shape[1]
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and cos_sin.is_contiguous()
    qo = torch.empty((T, H, D), dtype=q.dtype, device=q.device)
    ko = torch.empty((T, KVH, D), dtype=k.dtype, device=k.device)
    if T:
        _rope_qk_kernel[(T,)](
            q, k, qo, ko, positions, cos_sin,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), qo.stride(0), qo.stride(1), ko.stride(0), ko.stride(1),
            H=H, KVH=KVH, D=D, BLOCK_H=next_pow2(H), BLOCK_KVH=next_pow2(KVH), BLOCK_D=next_pow2(D),
            ROT=rotary_dim, PAIRWISE=style == "pairwise", num_warps=4,
        )
    return qo, ko
