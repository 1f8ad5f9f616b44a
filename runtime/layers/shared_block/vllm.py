"""The vllm target's helpers of shared blocks: a per-use LoRA adapter on vLLM's parallel linears (imported only
there)."""
from __future__ import annotations

import torch
from torch import nn
from vllm.model_executor.layers.linear import ColumnParallelLinear, MergedColumnParallelLinear, ReplicatedLinear


class LoRA(nn.Sequential):
    """``B(A(x))``: ``0`` = A ``[rank, in]`` replicated, ``1`` = B ``[out, rank]`` column-parallel like the projection
    it adds to (``out`` a list: merged parts, each sharded on its own; a stored fused tensor is split by vLLM's
    loader). Children named as HF's ``nn.Sequential``, so the checkpoint's ``.0.weight`` / ``.1.weight`` load."""

    def __init__(self, in_features: int, rank: int, out_features: int | list[int], prefix: str):
        if isinstance(out_features, list):
            up: nn.Module = MergedColumnParallelLinear(rank, out_features, bias=False, prefix=f"{prefix}.1")
        else:
            up = ColumnParallelLinear(rank, out_features, bias=False, prefix=f"{prefix}.1")
        super().__init__(ReplicatedLinear(in_features, rank, bias=False, prefix=f"{prefix}.0"), up)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, _ = self[0](x)
        b, _ = self[1](a)
        return b
