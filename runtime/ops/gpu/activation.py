"""Triton gated activation: ``act(gate) * up`` over a fused ``[T, 2 * I]`` gate/up tensor in one pass.

Rounding follows torch on the reference path: the activation is rounded to the activation dtype, then the product.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl


@triton.jit
def _gated_kernel(x_ptr, o_ptr, s_x, s_o, I, BLOCK: tl.constexpr, GELU: tl.constexpr, PDL: tl.constexpr):
    pdl.wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < I
    g = tl.load(x_ptr + row * s_x + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + row * s_x + I + offs, mask=mask, other=0.0).to(tl.float32)
    if GELU:
        c: tl.constexpr = 0.7978845608028654  # sqrt(2 / pi)
        inner = c * (g + 0.044715 * g * g * g)
        e = tl.math.exp(-2.0 * tl.abs(inner))
        th = (1.0 - e) / (1.0 + e)
        th = tl.where(inner >= 0, th, -th)
        a = 0.5 * g * (1.0 + th)
    else:
        a = g / (1.0 + tl.math.exp(-g))
    a = a.to(o_ptr.dtype.element_ty).to(tl.float32)
    tl.store(o_ptr + row * s_o + offs, (a * u).to(o_ptr.dtype.element_ty), mask=mask)


def gated(x: torch.Tensor, kind: str = "silu") -> torch.Tensor:
    shape = x.shape
    I = shape[-1] // 2
    x2 = x.reshape(-1, shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    T = x2.shape[0]
    out = torch.empty((T, I), dtype=x.dtype, device=x.device)
    if T:
        block = 1024 if I >= 1024 else triton.next_power_of_2(I)
        _gated_kernel[(T, triton.cdiv(I, block))](x2, out, x2.stride(0), out.stride(0), I, BLOCK=block,
                                                  GELU=kind == "gelu_tanh", num_warps=4,
                                                  **pdl.launch(x.device))
    return out.view(*shape[:-1], I)
