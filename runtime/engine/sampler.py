"""Token sampling on the logits' device: greedy, temperature, top-k, top-p, per-request seeded generators."""
from __future__ import annotations

import math
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
        # Each check names the parameter, the value and what is expected (NaN passes every comparison, so the
        # float checks test finiteness first).
        def bad(name: str, want: str) -> ValueError:
            return ValueError(f"{name} = {getattr(self, name)!r}: expected {want}")

        def is_int(v) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def is_num(v) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

        if not is_num(self.temperature) or self.temperature < 0:
            raise bad("temperature", "a finite number >= 0 (0 = greedy)")
        if not is_num(self.top_p) or not 0 < self.top_p <= 1:
            raise bad("top_p", "a number in (0, 1] (1 = off)")
        if not is_int(self.top_k) or self.top_k < 0:
            raise bad("top_k", "an integer >= 0 (0 = off)")
        if not is_int(self.max_new_tokens) or self.max_new_tokens < 0:
            raise bad("max_new_tokens", "an integer >= 0")
        if self.seed is not None and (not is_int(self.seed) or not 0 <= self.seed < 2**64):
            raise bad("seed", "an integer in [0, 2**64 - 1] (torch generator seeds are 64-bit)")
        if not all(is_int(t) and t >= 0 for t in self.stop_token_ids):
            raise bad("stop_token_ids", "non-negative integers")


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
