"""TP-sharded experts on the neuron target: the generated MoE asks :func:`expert_loaders` for its local expert range
and the closure loaders of its stacked parameters; with ``expert_parallel_size`` below the world
(``distributed.moe_layout``) each loader also cuts this rank's intermediate slice of every local expert
(``distributed.expert_slice``, the same cut the rocm ``FusedMoE`` makes), so ``num_experts`` need not divide the
world. The slice is taken after the expert-range read, so a rank reads its experts whole (each rank's experts are
all experts when every expert is TP-sharded)."""
from __future__ import annotations

from typing import Any, Sequence

from ... import distributed
from ...neuron.expert_layouts import fused_expert_loader
from ...neuron.weight_loader import SafetensorsWeightLoader, expert_weight_loader


def _sliced(inner: SafetensorsWeightLoader, part: str, layout: distributed.MoELayout) -> SafetensorsWeightLoader:
    if layout.tp_size == 1:
        return inner

    def transform(slices: Sequence[Any], rank: int):
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
        loaders[part] = _sliced(inner, part, layout)
    return layout, loaders
