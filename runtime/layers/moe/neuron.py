"""Neuron closure loaders for fused expert tensors in a non-stacked checkpoint layout (GPT-OSS) and expert biases.

The stacked parameters are ``w13 [E_local, 2I, H]`` (gate rows, then up rows), ``w2 [E_local, H, I]``, and the biases
``w13_bias [E_local, 2I]``, ``w2_bias [E_local, H]``; ``runtime/layers/moe/ops.py`` ``stacked_from_fused`` converts one
rank's experts (sliced on dim 0, which every layout keeps for experts) into them.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from .ops import stacked_from_fused
from ...neuron.weight_loader import (
    SafetensorsWeightLoader, expert_parallel_tensor_dim_loader, expert_weight_loader, full_tensor_loader,
)


def fused_expert_loader(
    local_expert_indices: Sequence[int], total_num_experts: int, part: str, layout: str
) -> SafetensorsWeightLoader:
    """``part`` w13 / w2: one fused tensor converted from ``layout`` (per-expert tensors load as
    ``expert_weight_loader`` does); w13_bias / w2_bias: the fused ``*_bias`` tensor, converted alike."""
    if part in ("w13", "w2"):
        inner = expert_weight_loader(local_expert_indices, total_num_experts, part)
    else:
        inner = expert_parallel_tensor_dim_loader(local_expert_indices, full_tensor_loader(), expert_dim=0)

    def transform(slices: Sequence[Any], rank: int) -> torch.Tensor:
        t = inner.transform(slices, rank)
        return stacked_from_fused(t, part, layout) if len(slices) == 1 else t

    return SafetensorsWeightLoader(transform)
