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


# ---------------------------------------------------------------------------------------------- expert parallelism
# Each rank owns a contiguous expert range; the wrappers restrict the incoming slices to it *before* the inner loader
# runs, so a rank reads only its experts (the Neuron guide's three layouts).


def _check_contiguous(local_expert_indices: Sequence[int]) -> tuple[int, int]:
    lo, hi = local_expert_indices[0], local_expert_indices[-1]
    if list(local_expert_indices) != list(range(lo, hi + 1)):
        raise ValueError(f"local expert indices must be contiguous, got {list(local_expert_indices)}")
    return lo, hi


class SliceView:
    """A lazy slice restricted to ``[lo, hi]`` on one dim; indexing composes into one read of the final shape."""

    def __init__(self, inner: Any, dim: int, lo: int, hi: int):
        self.inner, self.dim, self.lo, self.hi = inner, dim, lo, hi

    def get_shape(self) -> list[int]:
        shape = list(self.inner.get_shape())
        shape[self.dim] = self.hi - self.lo + 1
        return shape

    def __getitem__(self, index: Any) -> torch.Tensor:
        shape = self.get_shape()
        index = list(index) if isinstance(index, tuple) else [index]
        index += [slice(None)] * (len(shape) - len(index))
        start, stop, step = index[self.dim].indices(shape[self.dim])
        if step != 1:
            raise ValueError("SliceView supports unit-step slices only")
        index[self.dim] = slice(self.lo + start, self.lo + stop)
        return self.inner[tuple(index)]


def expert_parallel_tensor_dim_loader(
    local_expert_indices: Sequence[int], original_loader: SafetensorsWeightLoader, expert_dim: int = 0
) -> SafetensorsWeightLoader:
    """(a) One tensor with experts on ``expert_dim`` (transformers v5 fused ``experts.gate_up_proj [E, 2I, H]``)."""
    lo, hi = _check_contiguous(local_expert_indices)
    inner = original_loader.transform
    return SafetensorsWeightLoader(lambda slices, rank: inner([SliceView(s, expert_dim, lo, hi) for s in slices], rank))


def _per_expert(slices: Sequence[Any], total_num_experts: int) -> int:
    """Checkpoint tensors per expert in a flat mapping list (2 for gate+up, 1 for down)."""
    if len(slices) % total_num_experts:
        raise ValueError(f"{len(slices)} checkpoint tensors do not split evenly over {total_num_experts} experts")
    return len(slices) // total_num_experts


def expert_parallel_grouped_loader(
    local_expert_indices: Sequence[int], original_loader: SafetensorsWeightLoader, total_num_experts: int
) -> SafetensorsWeightLoader:
    """(b) A flat list grouped by item across experts, ``[a_0..a_{E-1}, b_0..b_{E-1}]``: keep ``[lo:hi+1]`` per group."""
    lo, hi = _check_contiguous(local_expert_indices)
    inner = original_loader.transform

    def transform(slices: Sequence[Any], rank: int) -> torch.Tensor:
        groups = _per_expert(slices, total_num_experts)
        kept = [s for g in range(groups) for s in slices[g * total_num_experts + lo : g * total_num_experts + hi + 1]]
        return inner(kept, rank)

    return SafetensorsWeightLoader(transform)


def expert_parallel_interleaved_loader(
    local_expert_indices: Sequence[int], original_loader: SafetensorsWeightLoader, total_num_experts: int
) -> SafetensorsWeightLoader:
    """(c) A flat list interleaved per expert, ``[a_0, b_0, a_1, b_1, ...]``: keep the contiguous local block."""
    lo, hi = _check_contiguous(local_expert_indices)
    inner = original_loader.transform

    def transform(slices: Sequence[Any], rank: int) -> torch.Tensor:
        stride = _per_expert(slices, total_num_experts)
        return inner(list(slices[lo * stride : (hi + 1) * stride]), rank)

    return SafetensorsWeightLoader(transform)


def full_tensor_loader() -> SafetensorsWeightLoader:
    return SafetensorsWeightLoader(lambda slices, rank: slices[0][:])


def stacked_experts_loader(per_expert: int, order: str) -> SafetensorsWeightLoader:
    """Per-expert tensors -> ``[L, ...]``; ``per_expert`` pieces (gate, up) are concatenated on dim 0 first.

    ``order="interleaved"``: ``[a_0, b_0, a_1, b_1, ...]``; ``order="grouped"``: ``[a_0, a_1, ..., b_0, b_1, ...]``.
    """

    def transform(slices: Sequence[Any], rank: int) -> torch.Tensor:
        n = len(slices) // per_expert
        tensors = [s[:] for s in slices]
        if order == "interleaved":
            experts = [torch.cat(tensors[e * per_expert : (e + 1) * per_expert], dim=0) for e in range(n)]
        else:
            experts = [torch.cat([tensors[p * n + e] for p in range(per_expert)], dim=0) for e in range(n)]
        return torch.stack(experts)

    return SafetensorsWeightLoader(transform)


def expert_weight_loader(local_expert_indices: Sequence[int], total_num_experts: int, kind: str) -> SafetensorsWeightLoader:
    """Loader of a stacked expert parameter that accepts either checkpoint layout the generated mapping names:
    one fused tensor (a: experts on dim 0), per-expert ``w13`` pairs interleaved (c), per-expert ``w2`` grouped (b);
    ``w1``: non-gated experts' up projections, grouped as ``w2`` (Nemotron-H)."""
    fused = expert_parallel_tensor_dim_loader(local_expert_indices, full_tensor_loader(), expert_dim=0)
    if kind == "w13":
        per_expert = expert_parallel_interleaved_loader(
            local_expert_indices, stacked_experts_loader(2, "interleaved"), total_num_experts
        )
    elif kind in ("w2", "w1"):  # w1: a non-gated expert's up projection alone (one tensor per expert, grouped)
        per_expert = expert_parallel_grouped_loader(local_expert_indices, stacked_experts_loader(1, "grouped"), total_num_experts)
    else:
        raise ValueError(f"unknown expert parameter kind {kind!r}")

    def transform(slices: Sequence[Any], rank: int) -> torch.Tensor:
        return (fused if len(slices) == 1 else per_expert).transform(slices, rank)

    return SafetensorsWeightLoader(transform)
