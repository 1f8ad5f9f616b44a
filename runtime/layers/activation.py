"""Gated activation modules over a fused gate_up output (one Triton kernel on a GPU, torch reference elsewhere)."""
from __future__ import annotations

import torch
from torch import nn

from ..ops import gpu
from ..ops.activation import gelu_tanh_and_mul, silu_and_mul


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if gpu.enabled(x):
            from ..ops.gpu.activation import gated

            return gated(x, "silu")
        return silu_and_mul(x)


class GeluTanhAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if gpu.enabled(x):
            from ..ops.gpu.activation import gated

            return gated(x, "gelu_tanh")
        return gelu_tanh_and_mul(x)
