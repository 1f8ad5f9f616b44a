"""Gated activations on a fused ``[..., 2 * I]`` gate/up tensor (gate first, as MergedColumnParallelLinear packs)."""
from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def gelu_tanh_and_mul(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up


def clamped_swiglu(x: torch.Tensor, alpha: float, limit: float) -> torch.Tensor:
    """GPT-OSS's experts (``GptOssExperts._apply_gate``), on gate-first halves: the gate is clamped from above, the up
    projection to ``[-limit, limit]``, and ``(up + 1) * gate * sigmoid(alpha * gate)`` (same operation order as HF).
    The checkpoint interleaves gate/up columns; loading de-interleaves them into the two halves this reads."""
    gate, up = x.chunk(2, dim=-1)
    gate = gate.clamp(min=None, max=limit)
    up = up.clamp(min=-limit, max=limit)
    glu = gate * torch.sigmoid(gate * alpha)
    return (up + 1) * glu


GATED_ACTIVATIONS = {"silu": silu_and_mul, "gelu_tanh": gelu_tanh_and_mul}
# Activations with parameters (name -> function taking the fused tensor and keyword parameters).
PARAMETRIC_GATED_ACTIVATIONS = {"clamped_swiglu": clamped_swiglu}


def gated_activation(activation: str | Callable, params: dict[str, float] | None = None) -> Callable:
    """The function for ``activation`` (a name, with ``params`` for parametric ones) or a callable as is."""
    if callable(activation):
        return activation
    if activation in PARAMETRIC_GATED_ACTIVATIONS:
        return functools.partial(PARAMETRIC_GATED_ACTIVATIONS[activation], **(params or {}))
    if activation not in GATED_ACTIVATIONS:
        known = sorted(GATED_ACTIVATIONS) + sorted(PARAMETRIC_GATED_ACTIVATIONS)
        raise ValueError(f"gated activation {activation!r} not in {known}")
    return GATED_ACTIVATIONS[activation]
