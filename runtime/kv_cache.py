"""KV-cache declarations (the Neuron guide's KVSpec/LayerSpec) and their allocation.

A model declares what each layer needs with ``get_kv_spec()``; the engine sizes and allocates it and hands it back
with ``bind_kv_cache()``. ``kind`` leaves room for layers that need something other than K/V blocks:
  paged_kv   K and V blocks ``[num_blocks, num_kv_heads, block_size, head_size]`` (HND), optional sliding window;
  (later)    paged_latent for MLA's compressed KV, recurrent_state for Gated DeltaNet's per-request state.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class LayerSpec:
    name: str  # attn_metadata / kv_caches key, e.g. "layers.0.self_attn"
    num_kv_heads: int  # per rank
    head_size: int
    dtype: torch.dtype
    kind: str = "paged_kv"
    sliding_window: int | None = None

    def bytes_per_block(self, block_size: int) -> int:
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_kv_heads * block_size * self.head_size * itemsize

    def allocate(self, num_blocks: int, block_size: int, device: torch.device | str) -> list[torch.Tensor]:
        """K and V blocks of this layer. A layer with another cache kind declares its own spec class with
        ``bytes_per_block`` and ``allocate`` (next to its runtime layer), so this file needs no branch per kind."""
        if self.kind != "paged_kv":
            raise NotImplementedError(f"{self.name}: cache kind {self.kind!r} is not implemented by LayerSpec")
        shape = (num_blocks, self.num_kv_heads, block_size, self.head_size)
        return [torch.zeros(shape, dtype=self.dtype, device=device) for _ in range(2)]


@dataclass(frozen=True)
class KVSpec:
    layers: list[LayerSpec] = field(default_factory=list)

    def bytes_per_block(self, block_size: int) -> int:
        return sum(layer.bytes_per_block(block_size) for layer in self.layers)


def allocate_kv_cache(
    spec: KVSpec, num_blocks: int, block_size: int, device: torch.device | str
) -> dict[str, list[torch.Tensor]]:
    """Zero-filled caches (zeros matter: the static write path relies on finite contents)."""
    caches: dict[str, list[torch.Tensor]] = {}
    for layer in spec.layers:
        if not hasattr(layer, "allocate"):
            raise NotImplementedError(f"{layer.name}: cache kind {layer.kind!r} is not allocated per block")
        caches[layer.name] = layer.allocate(num_blocks, block_size, device)
    return caches
