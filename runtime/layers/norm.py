"""RMSNorm module whose forward optionally fuses the residual add (``(x, residual) -> (normed, new_residual)``).

On a GPU (Triton importable, ``MODELGEN_BACKEND`` not ``torch``) both forms are one Triton kernel each
(``runtime/ops/gpu/norm.py``); elsewhere the torch reference of ``runtime/ops/norm.py`` runs.
"""
from __future__ import annotations

import torch
from torch import nn

from ..ops import gpu
from ..ops.norm import add_rms_norm, rms_norm


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size), requires_grad=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if gpu.enabled(x):
            from ..ops.gpu import norm as gpu_norm

            if residual is None:
                return gpu_norm.rms_norm(x, self.weight, self.eps)
            return gpu_norm.add_rms_norm(x, residual, self.weight, self.eps)
        if residual is None:
            return rms_norm(x, self.weight, self.eps)
        return add_rms_norm(x, residual, self.weight, self.eps)
