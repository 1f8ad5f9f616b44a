"""Sequence parallelism for tensor-parallel rocm models (Megatron-style; ``LLM(..., sequence_parallel=True)``).

Under plain TP every rank holds every token of the residual stream and runs the norms and residual adds on all of
them, after an all-reduce of each row-parallel output. With sequence parallelism the residual stream is split by
tokens: rank r holds rows ``[r*c, (r+1)*c)`` (``c = ceil(T / world)``, the last chunk zero-padded), so norms,
residual adds and routers run on 1/world of the tokens, and each all-reduce becomes a reduce-scatter (NCCL
``reduce_scatter_tensor``; gloo has none, so there an all-reduce and a slice) with an all-gather before the next
column-parallel GEMM. Applied to a built model by swapping the forward of its parallel modules, with no change to
the generated code:

  VocabParallelEmbedding   partial rows -> reduce-scatter (the embedding scatter)
  ColumnParallelLinear     all-gather the token shards, then the sharded GEMM (QKV, gate/up)
  RowParallelLinear        sharded GEMM -> reduce-scatter (o_proj, down), bias on the shard
  token-gathering layers    all-gather every argument (MoE: tokens and routing), the layer's own all-reduce, own
                           chunk kept (``LayerKind.sequence_parallel_gathers_tokens``)
  the backbone             all-gather its final (normed) hidden states, so the runner and LM head see every token

Attention itself runs on every token (its QKV input is gathered). Models with layers that refuse it
(``LayerKind.sequence_parallel_refusal``: MLA and Gated DeltaNet, whose cache writes come from replicated projections
of every token) are refused. ``tests/test_sequence_parallel.py`` checks TP=2
with SP against TP=1 on CPU (gloo).
"""
from __future__ import annotations

import types

import torch
import torch.distributed as dist
from torch import nn

from .. import distributed

_TOKENS = {"n": 0}  # tokens of the current forward (set by the embedding scatter, read by every gather)


def _chunk(n: int, world: int) -> int:
    return -(-n // world)


def scatter_tokens(x: torch.Tensor) -> torch.Tensor:
    """This rank's token chunk of a full ``[T, ...]`` tensor (zero-padded to ``ceil(T / world)`` rows)."""
    world, rank = distributed.tp_size(), distributed.tp_rank()
    c = _chunk(x.shape[0], world)
    part = x[rank * c:(rank + 1) * c]
    if part.shape[0] < c:
        part = torch.cat([part, part.new_zeros(c - part.shape[0], *part.shape[1:])])
    return part


def reduce_scatter_tokens(x: torch.Tensor) -> torch.Tensor:
    """Sum the ranks' partial ``[T, ...]`` results and keep this rank's token chunk."""
    world = distributed.tp_size()
    c = _chunk(x.shape[0], world)
    if dist.get_backend() == "nccl":
        if x.shape[0] < world * c:
            x = torch.cat([x, x.new_zeros(world * c - x.shape[0], *x.shape[1:])])
        out = torch.empty((c, *x.shape[1:]), dtype=x.dtype, device=x.device)
        dist.reduce_scatter_tensor(out, x.contiguous())
        return out
    return scatter_tokens(distributed.all_reduce(x))  # gloo implements no reduce-scatter


def gather_tokens(x: torch.Tensor) -> torch.Tensor:
    """Every rank's token chunk, concatenated and trimmed to the forward's token count."""
    return distributed.all_gather(x, dim=0)[: _TOKENS["n"]]


# ------------------------------------------------------------------------------------------------ swapped forwards
def _embedding_forward(self, input_ids: torch.Tensor) -> torch.Tensor:
    _TOKENS["n"] = input_ids.shape[0]
    local = input_ids - self.start
    inside = (local >= 0) & (local < self.per_rank)
    out = torch.nn.functional.embedding(local.clamp(0, self.per_rank - 1), self.weight)
    return reduce_scatter_tokens(out * inside[..., None].to(self.weight.dtype))


def _column_forward(self, x: torch.Tensor) -> torch.Tensor:
    return self._sp_inner_forward(gather_tokens(x))


def _row_forward(self, x: torch.Tensor) -> torch.Tensor:
    # the layer's own matmul (bf16, or its FP8 block-scaled GEMM when the weights were kept in FP8), bias added after
    y = reduce_scatter_tokens(self._mm(x, None))
    return y + self.bias if self.bias is not None else y


def _gathered_tokens_forward(self, *tensors: torch.Tensor):
    # A layer whose every argument is token-major (MoE: tokens, routing weights, expert ids) and whose forward sums
    # over ranks itself (the experts' partial sums): it runs on every token, and this rank keeps its own chunk.
    return scatter_tokens(self._sp_inner_forward(*(gather_tokens(t) for t in tensors)))


def _backbone_forward(self, *args, **kwargs):
    return gather_tokens(self._sp_inner_forward(*args, **kwargs))


def _swap(module: nn.Module, forward) -> None:
    module._sp_inner_forward = module.forward
    module.forward = types.MethodType(forward, module)


def enable_sequence_parallel(model: nn.Module) -> int:
    """Switch a built TP rocm model to sequence parallelism in place; returns the number of modules swapped (0 at
    world size 1, where there is nothing to split)."""
    from ..layers.embedding import ParallelLMHead, VocabParallelEmbedding
    from ..layers.kind import LayerKind, layer_kinds
    from ..layers.linear import ColumnParallelLinear, RowParallelLinear

    if distributed.tp_size() == 1:
        return 0
    refused = sorted({f"{type(m).__name__} ({why})" for m in layer_kinds(model)
                      if (why := m.sequence_parallel_refusal()) is not None})
    if refused:
        raise ValueError(f"sequence_parallel: not supported by {', '.join(refused)}")
    swapped = 0
    backbone = None
    for m in model.modules():
        if getattr(m, "_sp_inner_forward", None) is not None:
            continue
        if isinstance(m, VocabParallelEmbedding) and not isinstance(m, ParallelLMHead):
            m.forward = types.MethodType(_embedding_forward, m)
        elif isinstance(m, ColumnParallelLinear) and not getattr(m, "gather_output", False):
            _swap(m, _column_forward)
        elif isinstance(m, RowParallelLinear):
            m.forward = types.MethodType(_row_forward, m)
        elif isinstance(m, LayerKind) and m.sequence_parallel_gathers_tokens():
            _swap(m, _gathered_tokens_forward)
        else:
            if backbone is None and isinstance(getattr(m, "layers", None), nn.ModuleList) and m is not model:
                backbone = m
            continue
        m._sp_inner_forward = getattr(m, "_sp_inner_forward", True)
        swapped += 1
    if backbone is None:
        raise ValueError(f"sequence_parallel: {type(model).__name__} has no decoder layer list")
    _swap(backbone, _backbone_forward)
    return swapped + 1
