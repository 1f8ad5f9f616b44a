"""Norm modules whose forward optionally fuses the residual add (``(x, residual) -> (normed, new_residual)``).

On a GPU (Triton importable, ``MODELGEN_BACKEND`` not ``torch``) the plain and zero-centred affine RMSNorms are one
Triton kernel each (``runtime/ops/gpu/norm.py``); the other variants (float32 weight product, non-affine, LayerNorm)
run the torch references of ``runtime/ops/norm.py`` on every device.

``zero_centred=True`` is the ``x_hat * (1 + w)`` norm of Qwen3-Next / Gemma, whose checkpoint weight is the offset from
one (HF initialises it to zeros); ``weight_float32=True`` the ``(w * x_hat).to(dtype)`` of OLMo 2; ``affine=False`` a
norm without a learned weight.
"""
from __future__ import annotations

import torch
from torch import nn

from ..ops import gpu
from ..ops import norm as torch_norm


class RMSNorm(nn.Module):
    def __init__(
        self, hidden_size: int, eps: float, zero_centred: bool = False, weight_float32: bool = False,
        affine: bool = True,
    ):
        super().__init__()
        self.eps = eps
        self.zero_centred = zero_centred
        self.weight_float32 = weight_float32
        if affine:
            init = torch.zeros(hidden_size) if zero_centred else torch.ones(hidden_size)
            self.weight = nn.Parameter(init, requires_grad=False)
        else:
            self.register_parameter("weight", None)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        ops = torch_norm
        if gpu.enabled(x) and self.weight is not None and not self.weight_float32:
            from ..ops.gpu import norm as gpu_norm

            if residual is None:
                return gpu_norm.rms_norm(x, self.weight, self.eps, self.zero_centred)
            return gpu_norm.add_rms_norm(x, residual, self.weight, self.eps, self.zero_centred)
        if residual is None:
            return ops.rms_norm(x, self.weight, self.eps, self.zero_centred, self.weight_float32)
        return ops.add_rms_norm(x, residual, self.weight, self.eps, self.zero_centred, self.weight_float32)


class LayerNorm(nn.Module):
    """``nn.LayerNorm`` over the last dimension (StableLM, GPT-NeoX), with the residual-add form of :class:`RMSNorm`."""

    def __init__(self, hidden_size: int, eps: float, bias: bool = True, affine: bool = True):
        super().__init__()
        self.eps = eps
        if affine:
            self.weight = nn.Parameter(torch.ones(hidden_size), requires_grad=False)
        else:
            self.register_parameter("weight", None)
        if affine and bias:
            self.bias = nn.Parameter(torch.zeros(hidden_size), requires_grad=False)
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return torch_norm.layer_norm(x, self.weight, self.bias, self.eps)
        return torch_norm.add_layer_norm(x, residual, self.weight, self.bias, self.eps)


class PerHeadNorm(nn.Module):
    """A norm per head, each with its own weights (StableLM ``q_layernorm.norms.{h}``), over ``[tokens, heads, D]``:
    head ``h`` goes through ``norms[h]``, as HF's ``StableLmLayerNormPerHead`` splits the heads and concatenates."""

    def __init__(self, norms: list[nn.Module]):
        super().__init__()
        self.norms = nn.ModuleList(norms)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([norm(x[:, h]) for h, norm in enumerate(self.norms)], dim=1)
