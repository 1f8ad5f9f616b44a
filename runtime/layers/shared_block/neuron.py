"""Closure loaders of shared blocks on the neuron target (weights stored ``[in, out]``)."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from ...neuron.weight_loader import SafetensorsWeightLoader


def merged_rows_loader(sizes: Sequence[int], world: int) -> SafetensorsWeightLoader:
    """A stored fused ``[sum(sizes), in]`` tensor (HF's ``gate_up_proj``: ``[gate | up]`` rows) -> this rank's rows of
    each part, concatenated and transposed to ``[in, sum(sizes) / world]`` (each part sharded on its own)."""

    def transform(slices: Sequence[Any], rank: int) -> torch.Tensor:
        s = slices[0]
        rows = s.get_shape()[0]
        if rows != sum(sizes):
            raise ValueError(f"stored fused tensor has {rows} rows, expected {sum(sizes)} ({list(sizes)})")
        parts, start = [], 0
        for size in sizes:
            local = size // world
            parts.append(s[start + rank * local:start + (rank + 1) * local])
            start += size
        return torch.cat(parts, dim=0).t()

    return SafetensorsWeightLoader(transform)
