"""Gated activation modules over a fused gate_up output."""
from __future__ import annotations

import torch
from torch import nn

from ..ops.activation import gelu_tanh_and_mul, silu_and_mul


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(x)


class GeluTanhAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_tanh_and_mul(x)
