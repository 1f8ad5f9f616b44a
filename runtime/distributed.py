"""Tensor-parallel state over ``torch.distributed`` (gloo on CPU, nccl/rccl on GPUs).

Generated modules ask for ``tp_rank()``/``tp_size()`` when they build their layers; collectives are no-ops at world size
1 so the single-process path (and ``torch.compile`` tracing of it) never touches ``torch.distributed``.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def tp_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def tp_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum partial results of a row-parallel layer across ranks (in place)."""
    if tp_size() > 1:
        dist.all_reduce(x)
    return x


def all_gather(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Concatenate each rank's shard along ``dim`` (column-parallel outputs, vocab-sharded logits)."""
    world = tp_size()
    if world == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=dim)


def divide(numerator: int, denominator: int, what: str) -> int:
    if numerator % denominator:
        raise ValueError(f"{what} ({numerator}) is not divisible by the tensor-parallel size ({denominator})")
    return numerator // denominator


def kv_heads_per_rank(num_kv_heads: int, world: int) -> tuple[int, int]:
    """(kv heads held by each rank, replicas of each kv head).

    With fewer KV heads than ranks (GQA/MQA at high TP) every rank holds one KV head and each head is replicated on
    ``world // num_kv_heads`` ranks, as vLLM Neuron's ``num_kv_replicas``.
    """
    if num_kv_heads >= world:
        return divide(num_kv_heads, world, "num_kv_heads"), 1
    if world % num_kv_heads:
        raise ValueError(f"tensor-parallel size {world} is not a multiple of num_kv_heads {num_kv_heads}")
    return 1, world // num_kv_heads


def kv_head_offset(rank: int, num_kv_heads: int, world: int) -> int:
    """First KV head index owned by ``rank``."""
    per_rank, replicas = kv_heads_per_rank(num_kv_heads, world)
    return (rank // replicas) * per_rank
