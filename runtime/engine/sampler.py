"""Token sampling on the logits' device: greedy, temperature, top-k, top-p, min-p, per-request seeded generators;
repetition / frequency / presence penalties and logit bias (vLLM's and OpenAI's semantics) and log-probabilities of
the sampled and top tokens (from the model's raw logits, before penalties and temperature: vLLM's default
``raw_logprobs``)."""
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
    min_p: float = 0.0  # 0 = off; else drop tokens below min_p x the top token's probability
    presence_penalty: float = 0.0  # OpenAI: subtracted once from every token already generated
    frequency_penalty: float = 0.0  # OpenAI: subtracted per occurrence of a token already generated
    repetition_penalty: float = 1.0  # vLLM / HF: logits of prompt and generated tokens divided (>0) or multiplied
    logit_bias: dict[int, float] | None = None  # token id -> added to its logit (OpenAI's logit_bias)
    logprobs: int | None = None  # None: off; k >= 0: the sampled token's log-probability and the k most likely

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
        if not is_num(self.min_p) or not 0 <= self.min_p <= 1:
            raise bad("min_p", "a number in [0, 1] (0 = off)")
        for name in ("presence_penalty", "frequency_penalty"):
            if not is_num(getattr(self, name)) or not -2 <= getattr(self, name) <= 2:
                raise bad(name, "a number in [-2, 2] (0 = off)")
        if not is_num(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise bad("repetition_penalty", "a number > 0 (1 = off)")
        if self.logit_bias is not None and not (isinstance(self.logit_bias, dict) and all(
                is_int(k) and k >= 0 and is_num(v) for k, v in self.logit_bias.items())):
            raise bad("logit_bias", "a dict of token id -> finite number")
        if self.logprobs is not None and (not is_int(self.logprobs) or self.logprobs < 0):
            raise bad("logprobs", "None or an integer >= 0 (the number of top log-probabilities)")

    @property
    def uses_logits(self) -> bool:
        """Whether sampling needs more than an argmax of the raw logits (or temperature / top-k / top-p): penalties,
        logit bias, min-p or log-probabilities. Greedy fast paths (on-device argmax, pipelined decode) must not
        take such a request."""
        return bool(self.min_p or self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1.0
                    or self.logit_bias or self.logprobs is not None)


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


def apply_penalties(logits: torch.Tensor, p: SamplingParams, prompt: list[int], output: list[int]) -> torch.Tensor:
    """One row ``logits [V]`` with p's logit bias and penalties applied (vLLM's order and formulas): repetition
    penalty over prompt + output tokens (positive logits divided by it, negative ones multiplied), then
    ``- frequency_penalty * count - presence_penalty * (count > 0)`` over the output tokens."""
    if p.logit_bias:
        ids = torch.tensor([k for k in p.logit_bias if k < logits.shape[-1]], dtype=torch.long, device=logits.device)
        bias = torch.tensor([float(p.logit_bias[k]) for k in p.logit_bias if k < logits.shape[-1]],
                            dtype=logits.dtype, device=logits.device)
        logits = logits.index_add(0, ids, bias)
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(prompt) | set(output)), dtype=torch.long, device=logits.device)
        if seen.numel():
            vals = logits[seen]
            logits = logits.index_put((seen,), torch.where(vals > 0, vals / p.repetition_penalty,
                                                           vals * p.repetition_penalty))
    if (p.frequency_penalty or p.presence_penalty) and output:
        counts = torch.bincount(torch.tensor(output, dtype=torch.long, device=logits.device),
                                minlength=logits.shape[-1])[: logits.shape[-1]].to(logits.dtype)
        logits = logits - p.frequency_penalty * counts - p.presence_penalty * (counts > 0).to(logits.dtype)
    return logits


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None],
           histories: list[tuple[list[int], list[int]]] | None = None,
           logprobs_out: list | None = None) -> list[int]:
    """One token per row of ``logits [num_seqs, V]``.

    ``histories``: each row's (prompt, output so far) token ids, for the penalties (rows whose params have none may
    be anything). ``logprobs_out``: when a list, one entry per row is appended: None, or for params with
    ``logprobs = k`` a tuple ``(sampled token's logprob, [(token id, logprob)] of the k most likely tokens)``."""
    logits = logits.float()
    raw = logits
    if histories is not None and any(p.logit_bias or p.repetition_penalty != 1.0 or p.frequency_penalty
                                     or p.presence_penalty for p in params):
        logits = torch.stack([apply_penalties(logits[i], p, *histories[i]) for i, p in enumerate(params)])
    greedy = [p.temperature == 0 for p in params]
    out = logits.argmax(-1).tolist() if any(greedy) else [0] * len(params)
    for i, p in enumerate(params):
        if greedy[i]:
            continue
        row = filter_logits(logits[i] / p.temperature, p.top_k, p.top_p)
        probs = row.softmax(-1)
        if p.min_p:
            probs = probs.masked_fill(probs < p.min_p * probs.max(), 0.0)
        out[i] = int(torch.multinomial(probs, 1, generator=generators[i]).item())
    if logprobs_out is not None:
        need = [p.logprobs is not None for p in params]
        lp = raw[[i for i, n in enumerate(need) if n]].log_softmax(-1) if any(need) else None
        j = 0
        for i, p in enumerate(params):
            if not need[i]:
                logprobs_out.append(None)
                continue
            row = lp[j]
            j += 1
            top = torch.topk(row, min(p.logprobs, row.shape[-1])) if p.logprobs else None
            logprobs_out.append((float(row[out[i]]), [] if top is None else
                                 list(zip(top.indices.tolist(), top.values.tolist()))))
    return out
