"""Neuron closure loaders for fused expert tensors in a non-stacked checkpoint layout (GPT-OSS) and expert biases.

The stacked parameters are ``w13 [E_local, 2I, H]`` (gate rows, then up rows), ``w2 [E_local, H, I]``, and the biases
``w13_bias [E_local, 2I]``, ``w2_bias [E_local, H]``; ``runtime/layers/moe/ops.py`` ``stacked_from_fused`` converts one
rank's experts (sliced on dim 0, which every layout keeps for experts) into them.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from .ops import experts_from_flat, stacked_from_fused
from ...neuron.weight_loader import (
    SafetensorsWeightLoader, expert_parallel_tensor_dim_loader, expert_weight_loader, full_tensor_loader,
)


def fused_expert_loader(
    local_expert_indices: Sequence[int], total_num_experts: int, part: str, layout: str
) -> SafetensorsWeightLoader:
    """``part`` w13 / w2: one fused tensor converted from ``layout`` (per-expert tensors load as
    ``expert_weight_loader`` does); w13_bias / w2_bias: the fused ``*_bias`` tensor, converted alike. ``layout``
    flat (DBRX): w13 from the gate and up tensors, w2 from the down tensor, each ``[E * I, H]``."""
    if layout == "flat":
        return _flat_expert_loader(local_expert_indices, total_num_experts, part)
    if part in ("w13", "w2"):
        inner = expert_weight_loader(local_expert_indices, total_num_experts, part)
    else:
        inner = expert_parallel_tensor_dim_loader(local_expert_indices, full_tensor_loader(), expert_dim=0)

    def transform(slices: Sequence[Any], rank: int) -> torch.Tensor:
        t = inner.transform(slices, rank)
        return stacked_from_fused(t, part, layout) if len(slices) == 1 else t

    return SafetensorsWeightLoader(transform)


def _flat_expert_loader(local_expert_indices: Sequence[int], total_num_experts: int, part: str) -> SafetensorsWeightLoader:
    """DBRX's flat expert tensors: this rank's experts' rows read from each (a contiguous range of dim 0), converted
    by ``experts_from_flat`` and stacked: w13 ``[E_local, 2I, H]`` (gate, then up), w2 ``[E_local, H, I]``."""
    lo, hi = min(local_expert_indices), max(local_expert_indices) + 1
    if list(local_expert_indices) != list(range(lo, hi)):
        raise ValueError(f"flat experts: local experts {list(local_expert_indices)} are not one contiguous range")
    shards = {"w13": ("w1", "w3"), "w2": ("w2",)}
    if part not in shards:
        raise ValueError(f"flat experts: no {part!r} tensor (DBRX experts have no biases)")

    def transform(slices: Sequence[Any], rank: int) -> torch.Tensor:
        if len(slices) != len(shards[part]):
            raise ValueError(f"flat experts ({part}): {len(slices)} checkpoint tensors, expected {len(shards[part])}")
        out = []
        for shard, s in zip(shards[part], slices):
            rows = s.get_shape()[0] // total_num_experts
            local = s[lo * rows: hi * rows]  # only this rank's experts' rows are read
            out.append(experts_from_flat(local, shard, hi - lo))
        return torch.cat(out, dim=1)

    return SafetensorsWeightLoader(transform)
