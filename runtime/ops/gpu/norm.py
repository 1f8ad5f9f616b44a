"""Triton RMSNorm and fused residual-add + RMSNorm (one read of x and residual, one write of each output).

Rounding follows HF ``LlamaRMSNorm`` (and ``runtime/ops/norm.py``): the residual sum is rounded to the activation
dtype, the mean of squares is taken in float32 over that rounded sum, the normalised value is rounded to the
activation dtype before the weight multiply, whose product is rounded once. With ``ZERO_CENTRED`` (Qwen3-Next /
Gemma ``x_hat * (1 + w)``) the normalised value stays float32 through the multiply, as HF computes it.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import next_pow2, pdl


@triton.jit
def _rms_norm_kernel(
    x_ptr, r_ptr, w_ptr, o_ptr, ro_ptr, eps, s_x, s_r, s_o, s_ro,
    N: tl.constexpr, BLOCK: tl.constexpr, ADD: tl.constexpr, ZERO_CENTRED: tl.constexpr, PDL: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    pdl.wait(PDL)  # x and residual come from the kernels before (runtime/ops/gpu/pdl.py)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + row * s_x + offs, mask=mask, other=0.0)
    if ADD:
        r = tl.load(r_ptr + row * s_r + offs, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(ro_ptr.dtype.element_ty)
        tl.store(ro_ptr + row * s_ro + offs, x, mask=mask)
    xf = x.to(tl.float32)
    var = tl.sum(xf * xf, 0) / N
    if ZERO_CENTRED:
        y = xf * tl.math.rsqrt(var + eps) * (1.0 + w)
    else:
        y = w * (xf * tl.math.rsqrt(var + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(o_ptr + row * s_o + offs, y.to(o_ptr.dtype.element_ty), mask=mask)


def _launch(x, residual, weight, eps, zero_centred=False):
    shape = x.shape
    N = shape[-1]
    x2 = x.reshape(-1, N)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    T = x2.shape[0]
    # Zero-centred norms round once to the activation dtype (HF ``.type_as(x)``); Llama's follows weight * x.
    out = torch.empty((T, N), dtype=x.dtype if zero_centred else torch.result_type(weight, x), device=x.device)
    block = next_pow2(N)
    warps = 4 if block <= 2048 else (8 if block <= 8192 else 16)
    if residual is not None:
        r2 = residual.reshape(-1, N)
        if r2.stride(-1) != 1:
            r2 = r2.contiguous()
        rout = torch.empty((T, N), dtype=x.dtype, device=x.device)
        if T:
            _rms_norm_kernel[(T,)](x2, r2, weight, out, rout, eps, x2.stride(0), r2.stride(0), out.stride(0),
                                   rout.stride(0), N=N, BLOCK=block, ADD=True, ZERO_CENTRED=zero_centred,
                                   num_warps=warps, **pdl.launch(x.device))
        return out.view(shape), rout.view(shape)
    if T:
        _rms_norm_kernel[(T,)](x2, x2, weight, out, out, eps, x2.stride(0), x2.stride(0), out.stride(0),
                               out.stride(0), N=N, BLOCK=block, ADD=False, ZERO_CENTRED=zero_centred,
                               num_warps=warps, **pdl.launch(x.device))
    return out.view(shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centred: bool = False) -> torch.Tensor:
    return _launch(x, None, weight, eps, zero_centred)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
                 zero_centred: bool = False):
    """``(rms_norm(x + residual), x + residual)``; with ``residual=None`` the input becomes the residual."""
    if residual is None:
        return _launch(x, None, weight, eps, zero_centred), x
    return _launch(x, residual, weight, eps, zero_centred)
