"""Norms as in HF: RMSNorm (Zhang & Sennrich 2019) in its three rounding conventions, and LayerNorm.

Precision: HF ``LlamaRMSNorm`` computes the mean of squares in float32 and casts back to the input dtype *before*
multiplying by the weight (``weight * hidden.to(input_dtype)``); matching that order matters for bf16 parity.

Zero-centred RMSNorm (HF ``Qwen3NextRMSNorm``, ``Gemma*RMSNorm``): the checkpoint stores the weight as an offset from
one (initialised to zeros) and the output is ``x_hat * (1 + w)`` computed entirely in float32, rounded once at the end
(``(x * w).to(dtype)``, transformers PR 29402) -- the opposite order to Llama's.

``weight_float32`` (HF ``Olmo2RMSNorm``, ``T5LayerNorm``): ``(weight * x_hat).to(dtype)``, the weight multiplied onto the
float32 ``x_hat`` and the product rounded once (the weight itself is not offset).

``weight=None``: a non-affine norm (``x_hat`` only, rounded to the input dtype).

LayerNorm is ``F.layer_norm`` in the input dtype, exactly what ``nn.LayerNorm`` runs (its kernels accumulate the
statistics in float32 internally for half types).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, zero_centred: bool = False, weight_float32: bool = False
) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return apply_rms_weight(h, weight, x.dtype, zero_centred, weight_float32)


def apply_rms_weight(
    h: torch.Tensor, weight: torch.Tensor | None, dtype: torch.dtype, zero_centred: bool = False,
    weight_float32: bool = False,
) -> torch.Tensor:
    """The float32 ``x_hat`` -> output in ``dtype``, with the weight in each convention's order (module docstring)."""
    if weight is None:
        return h.to(dtype)
    if zero_centred:
        return (h * (1.0 + weight.float())).to(dtype)
    if weight_float32:
        return (weight * h).to(dtype)
    return weight * h.to(dtype)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None, eps: float, zero_centred: bool = False,
    weight_float32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual = x + residual; return rms_norm(residual), residual`` (the fused residual-add + norm of vLLM/ATOM).

    With ``residual=None`` (first layer) the input itself becomes the residual stream.
    """
    if residual is not None:
        x = x + residual
    return rms_norm(x, weight, eps, zero_centred, weight_float32), x


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def add_layer_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual = x + residual; return layer_norm(residual), residual`` (as :func:`add_rms_norm`)."""
    if residual is not None:
        x = x + residual
    return layer_norm(x, weight, bias, eps), x
