"""RMSNorm (Zhang & Sennrich 2019) as in HF ``LlamaRMSNorm``.

Precision: HF computes the mean of squares in float32 and casts back to the input dtype *before* multiplying by the
weight (``weight * hidden.to(input_dtype)``); matching that order matters for bf16 parity.

Zero-centred RMSNorm (HF ``Qwen3NextRMSNorm``, ``Gemma*RMSNorm``): the checkpoint stores the weight as an offset from
one (initialised to zeros) and the output is ``x_hat * (1 + w)`` computed entirely in float32, rounded once at the end
(``(x * w).to(dtype)``, transformers PR 29402) -- the opposite order to Llama's.
"""
from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centred: bool = False) -> torch.Tensor:
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    if zero_centred:
        return (h * (1.0 + weight.float())).to(dtype)
    return weight * h.to(dtype)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float, zero_centred: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual = x + residual; return rms_norm(residual), residual`` (the fused residual-add + norm of vLLM/ATOM).

    With ``residual=None`` (first layer) the input itself becomes the residual stream.
    """
    if residual is not None:
        x = x + residual
    return rms_norm(x, weight, eps, zero_centred), x
