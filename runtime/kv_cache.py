"""KV-cache declarations (the Neuron guide's KVSpec/LayerSpec) and their allocation.

A model declares what each layer needs with ``get_kv_spec()``; the engine sizes and allocates it and hands it back
with ``bind_kv_cache()``. ``kind`` leaves room for layers that need something other than K/V blocks:
  paged_kv   K and V blocks ``[num_blocks, num_kv_heads, block_size, head_size]`` (HND), optional sliding window;
  paged_latent (MLA's compressed KV, ``runtime/layers/mla/layer.py``) and recurrent_state (Gated DeltaNet's
  per-request state, ``runtime/state_cache.py``) are declared by their own spec classes beside their layers.

A spec whose class sets ``per_request_state = True`` holds one slot per running request instead of paged blocks;
:meth:`KVSpec.paged` and :meth:`KVSpec.request_states` split a model's declaration on that answer, so the engine
never names a cache kind.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


class CacheFullError(RuntimeError):
    """Raised when a request can never fit in the KV cache, even with every other request evicted."""


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

    def paged(self) -> "KVSpec":
        """The layers whose caches are paged blocks (what the block budget and :func:`allocate_kv_cache` cover)."""
        return KVSpec(layers=[layer for layer in self.layers if not holds_request_state(layer)])

    def request_states(self) -> list:
        """The layers whose caches are one state slot per running request (a pool beside the blocks)."""
        return [layer for layer in self.layers if holds_request_state(layer)]


def holds_request_state(layer_spec) -> bool:
    """Whether a layer's cache spec is per-request state rather than paged blocks: its class says so with
    ``per_request_state`` (absent on the paged specs, which need not know the other kinds exist)."""
    return bool(getattr(layer_spec, "per_request_state", False))


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


def num_blocks_for_budget(
    spec: KVSpec, block_size: int, device: torch.device | str, *, kv_cache_memory: int | None = None,
    gpu_memory_utilization: float | None = None, state_bytes: int = 0, min_blocks: int = 1,
) -> int | None:
    """KV blocks that fit a memory budget (vLLM's ``gpu_memory_utilization`` / an explicit byte count), or None when
    neither is given (the engine then sizes for ``max_num_seqs`` full-length requests).

    ``kv_cache_memory``: bytes for the cache (any device; on CPU the only way to give a budget).
    ``gpu_memory_utilization``: the fraction of the GPU's memory this process may hold; what the model already
    reserved when this is called (its weights) is subtracted, and the rest of the GPU (``1 - fraction``) is the
    headroom for activations and CUDA graphs. ``state_bytes`` (per-request recurrent state) comes off the budget
    first. Each block costs ``spec.bytes_per_block(block_size)`` summed over the layers of this rank.
    """
    if kv_cache_memory is not None and gpu_memory_utilization is not None:
        raise ValueError("give kv_cache_memory or gpu_memory_utilization, not both")
    if kv_cache_memory is None and gpu_memory_utilization is None:
        return None
    dev = torch.device(device)
    if gpu_memory_utilization is not None:
        u = gpu_memory_utilization
        if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0 < u <= 1:
            raise ValueError(f"gpu_memory_utilization = {u!r}: expected a fraction in (0, 1]")
        if dev.type != "cuda":
            raise ValueError("gpu_memory_utilization applies to a CUDA device; on CPU give kv_cache_memory (bytes)")
        total = torch.cuda.get_device_properties(dev).total_memory
        used = torch.cuda.memory_reserved(dev)
        budget = int(total * u) - used
        what = (f"gpu_memory_utilization {u} of {total / 1e9:.1f} GB minus {used / 1e9:.2f} GB already reserved "
                f"(weights)")
    else:
        if isinstance(kv_cache_memory, bool) or not isinstance(kv_cache_memory, int) or kv_cache_memory < 1:
            raise ValueError(f"kv_cache_memory = {kv_cache_memory!r}: expected a positive number of bytes")
        budget, what = kv_cache_memory, f"kv_cache_memory {kv_cache_memory} bytes"
    per_block = spec.bytes_per_block(block_size)
    blocks = (budget - state_bytes) // per_block if per_block else 0
    if blocks < min_blocks:
        raise ValueError(
            f"{what} holds {max(blocks, 0)} KV blocks of {per_block} bytes (after {state_bytes} bytes of recurrent "
            f"state), fewer than the {min_blocks} one max_model_len request needs; raise the budget or lower "
            f"max_model_len"
        )
    return int(blocks)
