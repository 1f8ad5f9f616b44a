"""Helpers of shared blocks (see __init__.py). A shared block's weights are one module registered in every layer that
uses it, so its parameters keep the first user's checkpoint names (transformers' ``_tied_weights_keys`` saves them
there); what differs per use -- adapters, the output projection, the K/V cache -- is built per layer."""
from __future__ import annotations

import torch
from torch import nn

from ... import distributed as dist
from ...kv_cache import LayerSpec
from ..attention import PagedAttention
from ..linear import ColumnParallelLinear, MergedColumnParallelLinear, ReplicatedLinear


def refuse_split_modes(model: str) -> None:
    """A model whose shared block reads the token embeddings in every hybrid layer: a pipeline stage after the first
    has no embeddings (its placeholder returns zeros), and attention data parallelism would split the shared
    attention's requests from the mixers'; both are refused rather than run wrong (rocm)."""
    config = dist.parallel_config()
    if config.pipeline_parallel_size > 1 or config.data_parallel_size > 1:
        raise NotImplementedError(f"{model}: its shared block reads the token embeddings in every hybrid layer; "
                                  "pipeline_parallel_size and data_parallel_size above 1 are not generated for it")


class LoRA(nn.Sequential):
    """``B(A(x))``: ``0`` = A ``[rank, in]`` replicated, ``1`` = B ``[out, rank]`` column-parallel like the projection
    it adds to (``out`` a list: merged parts, e.g. gate and up, each sharded on its own and stored as one tensor)."""

    def __init__(self, in_features: int, rank: int, out_features: int | list[int]):
        if isinstance(out_features, list):
            up: nn.Module = MergedColumnParallelLinear(rank, out_features, bias=False)
            load_stored_fused(up)
        else:
            up = ColumnParallelLinear(rank, out_features, bias=False)
        super().__init__(ReplicatedLinear(in_features, rank, bias=False), up)


def load_stored_fused(layer: MergedColumnParallelLinear) -> None:
    """Let ``layer`` load its merged parts from one stored tensor (HF's ``gate_up_proj`` ``[gate | up]`` rows): the
    tensor is cut into ``output_sizes`` and each part goes through the shard-id loader, so TP shards each part."""
    merged = layer.weight_loader

    def loader(param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        if shard_id is not None:
            return merged(param, loaded, shard_id)
        if loaded.shape[0] != sum(layer.output_sizes):
            raise ValueError(f"stored fused tensor has {loaded.shape[0]} rows, expected {sum(layer.output_sizes)}")
        for i, part in enumerate(loaded.split(layer.output_sizes, dim=0)):
            merged(param, part, i)

    for param in (layer.weight, layer.bias):
        if param is not None:
            param.weight_loader = loader


class SharedPagedAttention(PagedAttention):
    """The paged K/V of one use of a shared attention (rocm): the projections are the shared block's, this layer's
    cache is its own (``layer_name`` = the using layer's)."""

    def kv_spec(self, dtype: torch.dtype) -> LayerSpec:
        """This use's cache, per rank: paged K and V blocks ``[num_blocks, num_kv_heads, block_size, head_dim]``."""
        return LayerSpec(name=self.layer_name, num_kv_heads=self.num_kv_heads, head_size=self.head_dim, dtype=dtype)

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self.k_cache, self.v_cache = kv_caches[self.layer_name]


class PagedKV(nn.Module):
    """The paged K/V tensors of one use of a shared attention (neuron): the shared block reads and writes them."""

    def __init__(self, layer_name: str, num_kv_heads: int, head_dim: int):
        super().__init__()
        self.layer_name, self.num_kv_heads, self.head_dim = layer_name, num_kv_heads, head_dim
        self.k_cache: torch.Tensor | None = None  # bound by bind_kv_cache: [num_blocks, kv_heads, block_size, head_dim]
        self.v_cache: torch.Tensor | None = None

    def kv_spec(self, dtype: torch.dtype) -> LayerSpec:
        """This use's cache, per rank: paged K and V blocks ``[num_blocks, num_kv_heads, block_size, head_dim]``."""
        return LayerSpec(name=self.layer_name, num_kv_heads=self.num_kv_heads, head_size=self.head_dim, dtype=dtype)

    def bind_kv_cache(self, kv_caches: dict[str, list[torch.Tensor]]) -> None:
        self.k_cache, self.v_cache = kv_caches[self.layer_name]
