"""TP-sharded experts on the neuron target: the generated MoE asks :func:`expert_loaders` for its local expert range
and the closure loaders of its stacked parameters; with ``expert_parallel_size`` below the world
(``distributed.moe_layout``) each loader also cuts this rank's intermediate slice of every local expert -- the cut
``distributed.expert_slice`` describes and the rocm ``FusedMoE`` makes -- so ``num_experts`` need not divide the
world.

The cut is made on the lazy safetensors slices before anything is read (:func:`_narrowed`), so a rank reads only
its slice's bytes of each local expert, as the rocm loader narrows its memory-mapped tensors: per-expert gate / up
rows and down columns; transformers v5's fused ``[E, 2I, H]`` gate-up rows as two ranges (gate, then up) and
``[E, H, I]`` down columns; GPT-OSS's interleaved ``[E, H, 2I]`` gate-up as one contiguous range of the last dim
(gate/up pairs ``2j, 2j+1`` of slice ``r`` are columns ``[2rn, 2rn + 2n)``), ``[E, I, H]`` down rows, and the
interleaved gate-up bias alike; Llama 4's transposed ``[E, H, 2I]`` gate-up as two ranges of the last dim (gate, then
up) and ``[E, I, H]`` down rows. The down-projection bias is added once after the ranks' partial sums: rank 0 keeps
it, the others hold zeros (nothing to narrow)."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from ... import distributed
from ...layers.moe.neuron import fused_expert_loader
from ...neuron.weight_loader import SafetensorsWeightLoader, SliceView, expert_weight_loader


class _Ranges:
    """A lazy slice restricted to several ``(start, stop)`` ranges of one dim, concatenated (gate rows then up
    rows); indexing composes into one narrow read per range."""

    def __init__(self, inner: Any, dim: int, ranges: Sequence[tuple[int, int]]):
        self.inner, self.dim, self.ranges = inner, dim, list(ranges)

    def get_shape(self) -> list[int]:
        shape = list(self.inner.get_shape())
        shape[self.dim] = sum(stop - start for start, stop in self.ranges)
        return shape

    def __getitem__(self, index: Any) -> torch.Tensor:
        ndim = len(self.inner.get_shape())
        index = list(index) if isinstance(index, tuple) else [index]
        index += [slice(None)] * (ndim - len(index))
        if index[self.dim] != slice(None):
            raise ValueError("an expert's gate/up slice is read whole along its split dim")
        parts = []
        for start, stop in self.ranges:
            index[self.dim] = slice(start, stop)
            parts.append(self.inner[tuple(index)])
        return torch.cat(parts, dim=self.dim)


def _narrowed(slices: Sequence[Any], part: str, layout_name: str | None, rank: int, size: int):
    """This rank's intermediate slice of each checkpoint slice, still lazy; None where the part has nothing to
    narrow (the down bias) or the layout is not one of the above (the caller then slices after reading)."""
    if part == "w2_bias" or layout_name == "flat":  # flat (DBRX): sliced after the local experts are read
        return None
    fused = len(slices) == 1
    layout = (layout_name or "stacked") if fused else "per_expert"

    def cut(full: int) -> tuple[int, int]:
        n = distributed.divide(full, size, "moe intermediate_size", by="ranks sharing each expert")
        return rank * n, rank * n + n

    if layout == "per_expert":
        if part == "w13":  # [gate_e, up_e] pairs, each [I, H]: rows
            return [SliceView(s, 0, *_closed(cut(s.get_shape()[0]))) for s in slices]
        if part == "w2":  # down_e [H, I]: columns
            return [SliceView(s, 1, *_closed(cut(s.get_shape()[1]))) for s in slices]
        return None
    s = slices[0]
    shape = s.get_shape()
    if layout == "stacked":  # w13 [E, 2I, H] / w13_bias [E, 2I]: gate rows, then up rows; w2 [E, H, I]
        if part in ("w13", "w13_bias"):
            half = shape[1] // 2
            lo, hi = cut(half)
            return [_Ranges(s, 1, [(lo, hi), (half + lo, half + hi)])]
        if part == "w2":
            return [SliceView(s, 2, *_closed(cut(shape[2])))]
        return None
    if layout == "interleaved_transposed":  # w13 [E, H, 2I] / w13_bias [E, 2I] interleaved; w2 [E, I, H]
        if part in ("w13", "w13_bias"):
            dim = len(shape) - 1
            lo, hi = cut(shape[dim] // 2)
            return [SliceView(s, dim, 2 * lo, 2 * hi - 1)]
        if part == "w2":
            return [SliceView(s, 1, *_closed(cut(shape[1])))]
    if layout == "transposed":  # Llama 4: w13 [E, H, 2I] gate columns, then up columns; w2 [E, I, H]
        if part == "w13":
            half = shape[2] // 2
            lo, hi = cut(half)
            return [_Ranges(s, 2, [(lo, hi), (half + lo, half + hi)])]
        if part == "w2":
            return [SliceView(s, 1, *_closed(cut(shape[1])))]
    return None


def _closed(bounds: tuple[int, int]) -> tuple[int, int]:
    """``[start, stop)`` -> SliceView's inclusive ``(lo, hi)``."""
    return bounds[0], bounds[1] - 1


def _sliced(inner: SafetensorsWeightLoader, part: str, layout: distributed.MoELayout,
            layout_name: str | None) -> SafetensorsWeightLoader:
    if layout.tp_size == 1:
        return inner

    def transform(slices: Sequence[Any], rank: int):
        narrow = _narrowed(slices, part, layout_name, layout.tp_rank, layout.tp_size)
        if narrow is not None:
            return inner.transform(narrow, rank)
        return distributed.expert_slice(inner.transform(slices, rank), part, layout.tp_rank, layout.tp_size)

    return SafetensorsWeightLoader(transform)


def expert_loaders(num_experts: int, parts: Sequence[str], layout_name: str | None = None):
    """(MoELayout, {part: loader}) for this rank. ``layout_name`` None: per-expert or transformers-v5 stacked
    tensors (``expert_weight_loader``); otherwise the fused checkpoint layout of ``fused_expert_loader``."""
    layout = distributed.moe_layout(num_experts)
    local = list(range(layout.expert_offset, layout.expert_offset + layout.num_local_experts))
    loaders = {}
    for part in parts:
        inner = expert_weight_loader(local, num_experts, part) if layout_name is None else \
            fused_expert_loader(local, num_experts, part, layout_name)
        loaders[part] = _sliced(inner, part, layout, layout_name)
    return layout, loaders
