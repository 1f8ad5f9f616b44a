"""Tensor-parallel state over ``torch.distributed`` (gloo on CPU, nccl/rccl on GPUs).

Generated modules ask for ``tp_rank()``/``tp_size()`` when they build their layers; collectives are no-ops at world size
1 so the single-process path (and ``torch.compile`` tracing of it) never touches ``torch.distributed``.

The tensor-parallel group is the whole world unless a parallel mode splits it (:func:`set_groups`): pipeline
parallelism (``runtime/parallel/pipeline.py``: world = PP x TP, rank = stage * TP + tp rank, one TP group per stage)
and attention data parallelism (``runtime/parallel/attention_dp.py``: each rank its own attention, MoE/MLP layers
over the whole world, :func:`world_scope`). Every collective here runs on the current TP group.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

# This rank's TP group: tp_state.py, one floor down, so the all-reduce kernels this module calls can read it too.
from .tp_state import set_groups, tp_group, tp_rank, tp_size, world_scope

__all__ = ["set_groups", "tp_group", "tp_rank", "tp_size", "world_scope", "all_reduce", "all_gather", "divide",
           "ParallelConfig", "set_parallel_config", "parallel_config", "MoELayout", "expert_slice", "moe_layout",
           "kv_heads_per_rank", "kv_head_offset"]


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum partial results of a row-parallel layer across ranks; use the returned tensor (in place on NCCL's and
    gloo's path, a new tensor from the one-shot kernel that small CUDA messages over the whole world take:
    runtime/ops/gpu/allreduce.py)."""
    if tp_size() > 1:
        if x.is_cuda and tp_group() is None:
            from .ops.gpu.allreduce import one_shot

            y = one_shot(x)
            if y is not None:
                return y
        dist.all_reduce(x, group=tp_group())
    return x


def all_gather(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Concatenate each rank's shard along ``dim`` (column-parallel outputs, vocab-sharded logits)."""
    world = tp_size()
    if world == 1:
        return x
    x = x.contiguous()
    group = tp_group()
    if dist.get_backend(group) == "nccl":
        # One collective into one buffer (no per-rank list): capturable in the rocm decode CUDA graphs.
        out = torch.empty((world, *x.shape), dtype=x.dtype, device=x.device)
        dist.all_gather_into_tensor(out, x, group=group)
        return torch.cat(out.unbind(0), dim=dim)
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x, group=group)
    return torch.cat(parts, dim=dim)


def divide(numerator: int, denominator: int, what: str, by: str = "tensor-parallel size") -> int:
    if numerator % denominator:
        raise ValueError(f"{what} ({numerator}) is not divisible by the {by} ({denominator})")
    return numerator // denominator


# ------------------------------------------------------------------------------------------- MoE parallel layout
@dataclass(frozen=True)
class ParallelConfig:
    """How the ranks of the (tensor-parallel) world split a MoE layer's experts.

    ``expert_parallel_size`` ``None`` (the default) keeps every expert whole on one rank (EP over all ranks, as
    before); ``1`` shards every expert's intermediate dimension over all ranks (ATOM's Mixtral "FusedMoE with TP
    sharding": ``num_experts`` need not divide the world); ``M`` between them groups the ranks into ``M``
    expert-parallel groups of ``world / M`` ranks, each group holding ``E / M`` experts TP-sharded over its ranks.
    Set by ``LLM(..., expert_parallel_size=M)`` before the model is built (every rank sets the same value).
    """

    expert_parallel_size: int | None = None
    # Token-split residual stream between the TP GEMMs (runtime/parallel/sequence.py), rocm target
    sequence_parallel: bool = False
    # Gated MLPs re-sharded inside D data-parallel groups, each on 1/D of the tokens (runtime/parallel/data.py), rocm
    mlp_data_parallel_size: int = 1
    # Decoder layers split over this many pipeline stages, one process (group of TP ranks) each
    # (runtime/parallel/pipeline.py), rocm
    pipeline_parallel_size: int = 1
    # Attention data-parallel ranks: each its own requests and KV cache, MoE/MLP layers over all ranks
    # (runtime/parallel/attention_dp.py), rocm
    data_parallel_size: int = 1


_CONFIG = ParallelConfig()


def set_parallel_config(config: ParallelConfig) -> None:
    global _CONFIG
    _CONFIG = config


def parallel_config() -> ParallelConfig:
    return _CONFIG


@dataclass(frozen=True)
class MoELayout:
    """This rank's share of a MoE layer: experts ``[expert_offset, expert_offset + num_local_experts)``, each
    sharded ``tp_size`` ways along its intermediate dimension, slice ``tp_rank``. Every (expert, slice) pair lives
    on exactly one rank, so summing the ranks' partial outputs (one all-reduce) gives the layer's output."""

    ep_size: int
    ep_rank: int
    tp_size: int
    tp_rank: int
    num_local_experts: int
    expert_offset: int


def expert_slice(t: torch.Tensor, part: str, rank: int, size: int) -> torch.Tensor:
    """Slice ``rank`` of ``size`` of full expert tensors along the intermediate dimension (TP-sharded experts):
    ``w13 [..., 2I, H]`` gate rows then up rows (each half sliced), ``w13_bias [..., 2I]`` alike, ``w1``/``w3``
    ``[..., I, H]`` rows, ``w2 [..., H, I]`` columns; ``w2_bias [..., H]`` is added after the sum over ranks'
    partial outputs, so slice 0 keeps it and the others hold zeros."""
    if size == 1:
        return t
    if part in ("w13", "w13_bias"):
        dim = -2 if part == "w13" else -1
        gate, up = t.chunk(2, dim=dim)
        n = divide(gate.shape[dim], size, "moe intermediate_size", by="ranks sharing each expert")
        return torch.cat([gate.narrow(dim, rank * n, n), up.narrow(dim, rank * n, n)], dim=dim)
    if part in ("w1", "w3", "w2"):
        dim = -1 if part == "w2" else -2
        n = divide(t.shape[dim], size, "moe intermediate_size", by="ranks sharing each expert")
        return t.narrow(dim, rank * n, n)
    if part == "w2_bias":
        return t if rank == 0 else torch.zeros_like(t)
    raise ValueError(f"unknown expert tensor {part!r}; expected w13, w1, w3, w2, w13_bias or w2_bias")


def moe_layout(num_experts: int, world: int | None = None, rank: int | None = None) -> MoELayout:
    world = tp_size() if world is None else world
    rank = tp_rank() if rank is None else rank
    ep = _CONFIG.expert_parallel_size or world
    if world % ep:
        raise ValueError(f"expert_parallel_size {ep} does not divide the world size {world}")
    moe_tp = world // ep
    ep_rank = rank // moe_tp
    if num_experts % ep:
        raise ValueError(f"num_experts ({num_experts}) is not divisible by the expert-parallel size ({ep}); "
                         f"expert_parallel_size=1 shards every expert over the ranks instead")
    local = num_experts // ep
    return MoELayout(ep, ep_rank, moe_tp, rank % moe_tp, local, ep_rank * local)


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
