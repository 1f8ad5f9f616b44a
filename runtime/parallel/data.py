"""MLP data parallelism for tensor-parallel rocm models (``LLM(..., mlp_data_parallel_size=D)``).

The world of W ranks forms D data-parallel groups of T = W / D ranks (group d = ranks ``d*T .. d*T+T-1``, as
SGLang's DP attention numbers them). Every gated MLP (a ``MergedColumnParallelLinear`` gate/up + a
``RowParallelLinear`` down; dense layers and shared experts) is re-sharded T ways inside each group instead of W
ways — its weights are replicated across the D groups — and each group runs it on its 1/D chunk of the step's tokens
(the last chunk zero-padded): the down projection's partial sums are all-reduced inside the group only, and the
chunks are all-gathered across groups (the ranks with the same position in their group) back to every token.
Per rank that is D times the MLP weights for 1/D of the tokens at T-way sharding: fewer, larger GEMM shards and
all-reduces over T ranks instead of W, as the Neuron guide's ``mlp_dp_size`` trades memory for batch scaling.
Attention, embeddings, MoE experts and the LM head keep their W-way layout. Applied to the built model before its
weights load (the linears' ``tp_size``/``tp_rank`` and parameter shapes change, so their ``weight_loader`` cuts
the T-way shard); ``tests/test_data_parallel.py`` checks W = 2, D = 2 against one rank on CPU (gloo).

Attention data parallelism (each group attending only its own requests, with its own KV cache) is not built: it
needs per-group request placement in the scheduler and per-group attention metadata.
"""
from __future__ import annotations

import types

import torch
import torch.distributed as dist
from torch import nn

from .. import distributed

def groups(world: int, dp: int):
    """(this rank's TP subgroup, its DP subgroup, T, D, tp sub-rank, dp rank). Every rank creates every group, in
    the same order (``new_group`` is collective), once per model build: groups of an earlier (destroyed) default
    group are never reused."""
    if world % dp:
        raise ValueError(f"mlp_data_parallel_size {dp} does not divide the world size {world}")
    t = world // dp
    tp_groups = [dist.new_group(list(range(d * t, (d + 1) * t))) for d in range(dp)]
    dp_groups = [dist.new_group(list(range(i, world, t))) for i in range(t)]
    rank = dist.get_rank()
    return tp_groups[rank // t], dp_groups[rank % t], t, dp, rank % t, rank // t


def _gather(x: torch.Tensor, group, size: int) -> torch.Tensor:
    x = x.contiguous()
    if dist.get_backend(group) == "nccl":
        out = torch.empty((size * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
        dist.all_gather_into_tensor(out, x, group=group)
        return out
    parts = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(parts, x, group=group)
    return torch.cat(parts)


def _reshard(linear: nn.Module, t: int, rank: int) -> None:
    """Re-shard a column/row-parallel linear T ways (rank ``rank``): new local parameter shapes, the attributes its
    ``weight_loader`` cuts by."""
    from ..layers.linear import RowParallelLinear

    world = linear.tp_size
    linear.tp_size, linear.tp_rank = t, rank
    row = isinstance(linear, RowParallelLinear)
    for name in ("weight", "bias"):
        p = getattr(linear, name, None)
        if p is None:
            continue
        shape = list(p.shape)
        if row and name == "weight":
            shape[1] = shape[1] * world // t
        elif not row:
            shape[0] = shape[0] * world // t
        new = nn.Parameter(torch.empty(shape, dtype=p.dtype, device=p.device), requires_grad=False)
        new.weight_loader = linear.weight_loader
        setattr(linear, name, new)
    if row:
        linear.in_features = linear.weight.shape[1]
    else:
        linear.out_features = linear.weight.shape[0]


def _row_forward(self, x: torch.Tensor) -> torch.Tensor:
    # the layer's own matmul (bf16, or its FP8 block-scaled GEMM when the weights were kept in FP8), bias added after
    y = self._mm(x, None)
    if self.tp_size > 1:
        dist.all_reduce(y, group=self._dp_tp_group)
    return y + self.bias if self.bias is not None else y


def _mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    n, d, rank = x.shape[0], self._dp_size, self._dp_rank
    c = -(-n // d)
    chunk = x[rank * c:(rank + 1) * c]
    if chunk.shape[0] < c:
        chunk = torch.cat([chunk, chunk.new_zeros(c - chunk.shape[0], *chunk.shape[1:])])
    return _gather(self._dp_inner_forward(chunk), self._dp_group, d)[:n]


def enable_mlp_data_parallel(model: nn.Module, dp: int) -> int:
    """Switch every gated MLP of a built (not yet loaded) TP rocm model to D = ``dp`` data-parallel groups; returns
    the number of MLPs switched."""
    from ..layers.linear import MergedColumnParallelLinear, RowParallelLinear

    world = distributed.tp_size()
    if dp == 1 or world == 1:
        return 0
    tp_group, dp_group, t, d, sub_rank, dp_rank = groups(world, dp)
    count = 0
    for m in list(model.modules()):
        kids = list(m.children())
        gate_up = [k for k in kids if isinstance(k, MergedColumnParallelLinear)]
        down = [k for k in kids if isinstance(k, RowParallelLinear)]
        if len(gate_up) != 1 or len(down) != 1 or getattr(m, "_dp_inner_forward", None) is not None:
            continue
        _reshard(gate_up[0], t, sub_rank)
        _reshard(down[0], t, sub_rank)
        down[0]._dp_tp_group = tp_group
        down[0].forward = types.MethodType(_row_forward, down[0])
        m._dp_size, m._dp_rank, m._dp_group = d, dp_rank, dp_group
        m._dp_inner_forward = m.forward
        m.forward = types.MethodType(_mlp_forward, m)
        count += 1
    if not count:
        raise ValueError(f"mlp_data_parallel_size: {type(model).__name__} has no gated MLP (gate/up + down) to split")
    return count
