"""Closure-based weight loaders in vLLM Neuron's style: ``transform(slices, rank) -> tensor``.

``slices`` are lazy safetensors slices (one per checkpoint key of the parameter's mapping), so a rank reads only its
shard. Checkpoint tensors are HF ``[out, in]``; with ``is_storage_transposed=True`` the parameter is ``[in, out]`` and
``shard_dim`` refers to the parameter's dims.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

Transform = Callable[[Sequence[Any], int], torch.Tensor]


@dataclass
class SafetensorsWeightLoader:
    transform: Transform | None = None


def set_weight_loader(param: torch.nn.Parameter, loader: SafetensorsWeightLoader) -> None:
    param.weight_loader = loader


def _read(slice_: Any, dim: int, start: int, size: int) -> torch.Tensor:
    """Read ``[start, start + size)`` along ``dim`` of a checkpoint tensor, touching only those bytes."""
    shape = slice_.get_shape()
    index = [slice(None)] * len(shape)
    index[dim] = slice(start, start + size)
    return slice_[tuple(index)]


def _checkpoint_dim(shard_dim: int, ndim: int, transposed: bool) -> int:
    return (ndim - 1 - shard_dim) if transposed and ndim == 2 else shard_dim


def _full_len(slice_: Any, dim: int) -> int:
    return slice_.get_shape()[dim]


def sharding_weight_loader(
    shard_dim: int, shard_size: int, num_shards: int, is_storage_transposed: bool = False
) -> SafetensorsWeightLoader:
    def transform(slices: Sequence[Any], rank: int) -> torch.Tensor:
        s = slices[0]
        ndim = len(s.get_shape())
        dim = _checkpoint_dim(shard_dim, ndim, is_storage_transposed)
        if _full_len(s, dim) != shard_size * num_shards:
            raise ValueError(
                f"checkpoint dim {dim} has {_full_len(s, dim)} rows, expected {shard_size} x {num_shards} shards"
            )
        t = _read(s, dim, rank * shard_size, shard_size)
        return t.t() if is_storage_transposed and ndim == 2 else t

    return SafetensorsWeightLoader(transform)


def transposed_loader() -> SafetensorsWeightLoader:
    """Full tensor, stored ``[in, out]`` (replicated weights)."""
    return SafetensorsWeightLoader(lambda slices, rank: slices[0][:].t())


def fused_qkv_weight_loader(
    q_size: int,
    kv_size: int,
    shard_dim: int,
    num_shards: int,
    is_storage_transposed: bool = False,
    num_kv_replicas: int = 1,
) -> SafetensorsWeightLoader:
    """Separate q/k/v checkpoint tensors -> this rank's ``[q | k | v]`` (rank sizes ``q_size``, ``kv_size``).

    With ``num_kv_replicas > 1`` (fewer KV heads than ranks) ranks ``r`` sharing ``r // num_kv_replicas`` read the
    same KV shard.
    """

    def transform(slices: Sequence[Any], rank: int) -> torch.Tensor:
        if len(slices) != 3:
            raise ValueError(f"fused QKV needs 3 checkpoint tensors (q, k, v), got {len(slices)}")
        q, k, v = slices
        ndim = len(q.get_shape())
        dim = _checkpoint_dim(shard_dim, ndim, is_storage_transposed)
        kv_rank = rank // num_kv_replicas
        for name, s, size, n in (("q", q, q_size, num_shards), ("k", k, kv_size, num_shards // num_kv_replicas),
                                 ("v", v, kv_size, num_shards // num_kv_replicas)):
            if _full_len(s, dim) != size * n:
                raise ValueError(f"{name}_proj has {_full_len(s, dim)} rows on dim {dim}, expected {size * n}")
        parts = [_read(q, dim, rank * q_size, q_size), _read(k, dim, kv_rank * kv_size, kv_size),
                 _read(v, dim, kv_rank * kv_size, kv_size)]
        t = torch.cat(parts, dim=dim)
        return t.t() if is_storage_transposed and ndim == 2 else t

    return SafetensorsWeightLoader(transform)


def with_rank_override(loader: SafetensorsWeightLoader, rank: int) -> SafetensorsWeightLoader:
    """Use ``rank`` instead of the TP rank (component data parallelism shards over a larger group)."""
    inner = loader.transform
    return SafetensorsWeightLoader(lambda slices, _rank: inner(slices, rank))


def padded_vocab_loader(vocab_size: int, per_rank: int, is_storage_transposed: bool = False) -> SafetensorsWeightLoader:
    """Vocab-sharded embedding / LM head rows; the last rank's rows past ``vocab_size`` are zero padding."""

    def transform(slices: Sequence[Any], rank: int) -> torch.Tensor:
        s = slices[0]
        if s.get_shape()[0] != vocab_size:
            raise ValueError(f"vocab dim has {s.get_shape()[0]} rows, expected {vocab_size}")
        start = rank * per_rank
        n = max(0, min(per_rank, vocab_size - start))
        rows = _read(s, 0, start, n)
        if n < per_rank:
            rows = torch.cat([rows, rows.new_zeros(per_rank - n, *rows.shape[1:])])
        return rows.t() if is_storage_transposed else rows

    return SafetensorsWeightLoader(transform)
