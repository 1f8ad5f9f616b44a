"""Vocab-parallel embedding and LM head (vocab split across ranks, padded to a multiple of the world size)."""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

from .. import distributed as dist
from .linear import linear


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int):
        super().__init__()
        self.tp_rank, self.tp_size = dist.tp_rank(), dist.tp_size()
        self.vocab_size = vocab_size
        self.per_rank = (vocab_size + self.tp_size - 1) // self.tp_size
        self.start = self.tp_rank * self.per_rank
        self.weight = nn.Parameter(torch.zeros(self.per_rank, hidden_size), requires_grad=False)
        self.weight.weight_loader = self.weight_loader

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        if loaded.shape[0] != self.vocab_size or loaded.shape[1:] != param.shape[1:]:
            raise ValueError(
                f"embedding: checkpoint tensor has shape {tuple(loaded.shape)}, "
                f"expected ({self.vocab_size}, {param.shape[1]})"
            )
        n = min(self.per_rank, self.vocab_size - self.start)
        param.data.zero_()  # padded rows (vocab not divisible by world size) stay zero
        param.data[:n].copy_(loaded[self.start : self.start + n])

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return F.embedding(input_ids, self.weight)
        local = input_ids - self.start
        inside = (local >= 0) & (local < self.per_rank)
        out = F.embedding(local.clamp(0, self.per_rank - 1), self.weight) * inside[..., None].to(self.weight.dtype)
        return dist.all_reduce(out)


class ParallelLMHead(VocabParallelEmbedding):
    """Vocab-sharded output projection; :meth:`compute_logits` gathers the full vocab on every rank."""

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = linear(hidden, self.weight)
        logits = dist.all_gather(logits, -1)
        return logits[..., : self.vocab_size]
