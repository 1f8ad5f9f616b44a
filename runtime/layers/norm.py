"""RMSNorm module whose forward optionally fuses the residual add (``(x, residual) -> (normed, new_residual)``).

On a GPU (Triton importable, ``MODELGEN_BACKEND`` not ``torch``) both forms are one Triton kernel each
(``runtime/ops/gpu/norm.py``); elsewhere the torch reference of ``runtime/ops/norm.py`` runs.

``zero_centred=True`` is the ``x_hat * (1 + w)`` norm of Qwen3-Next / Gemma, whose checkpoint weight is the offset from
one (HF initialises it to zeros).
"""
from __future__ import annotations

import torch
from torch import nn

from ..ops import gpu
from ..ops import norm as torch_norm


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float, zero_centred: bool = False):
        super().__init__()
        self.eps = eps
        self.zero_centred = zero_centred
        init = torch.zeros(hidden_size) if zero_centred else torch.ones(hidden_size)
        self.weight = nn.Parameter(init, requires_grad=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        ops = torch_norm
        if gpu.enabled(x):
            from ..ops.gpu import norm as ops
        if residual is None:
            return ops.rms_norm(x, self.weight, self.eps, self.zero_centred)
        return ops.add_rms_norm(x, residual, self.weight, self.eps, self.zero_centred)
