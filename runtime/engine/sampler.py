"""Token sampling on the logits' device: greedy, temperature, top-k, top-p, per-request seeded generators."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class SamplingParams:
    max_new_tokens: int = 16
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    seed: int | None = None
    ignore_eos: bool = False  # keep generating past EOS; logits are never modified
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if self.max_new_tokens < 0:
            raise ValueError("max_new_tokens must be >= 0")


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (to -inf) what top-k / top-p exclude; ``logits [V]`` already divided by the temperature."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(-1)
        # Drop a token when the tokens ranked above it already reach top_p (the best token is always kept).
        drop = probs.cumsum(-1) - probs >= top_p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return logits


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]) -> list[int]:
    """One token per row of ``logits [num_seqs, V]``."""
    logits = logits.float()
    greedy = [p.temperature == 0 for p in params]
    out = logits.argmax(-1).tolist() if any(greedy) else [0] * len(params)
    for i, p in enumerate(params):
        if greedy[i]:
            continue
        row = filter_logits(logits[i] / p.temperature, p.top_k, p.top_p)
        probs = row.softmax(-1)
        out[i] = int(torch.multinomial(probs, 1, generator=generators[i]).item())
    return out
