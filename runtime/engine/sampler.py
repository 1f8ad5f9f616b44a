"""Token sampling on the logits' device: greedy, temperature, top-k, top-p, min-p, per-request seeded generators;
repetition / frequency / presence penalties and logit bias (vLLM's and OpenAI's semantics) and log-probabilities of
the sampled and top tokens (from the model's raw logits, before penalties and temperature: vLLM's default
``raw_logprobs``)."""
from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass, field

import torch

log = logging.getLogger(__name__)

_UNSET = object()
# Sampling temperatures below this are raised to it (vLLM's floor): dividing logits by less overflows float32.
MIN_TEMPERATURE = 1e-2
MAX_LOGIT_BIAS = 100  # OpenAI's documented logit_bias range is [-100, 100]


@dataclass(init=False)
class SamplingParams:
    """How one request is sampled; the names are vLLM's (``vllm.SamplingParams``).

    Args:
        max_tokens: tokens to generate at most (default 16); 0 generates nothing (finish reason ``"length"``).
        stop: a string or list of strings; the output text is cut before the first one that appears and the request
            ends with finish reason ``"stop"`` (text-level: needs the checkpoint's tokenizer). ``token_ids`` keep
            every generated token, the stop string's too.
        stop_token_ids: token ids that end the request (kept in the output, as EOS is), besides the EOS ids.
        n: outputs per prompt (default 1): ``n`` independent requests, sample ``i`` seeded ``seed + i`` when a seed
            is given.
        temperature: 0 (default) is greedy; above 0 samples from the softmax of logits / temperature (a value in
            (0, 0.01) is raised to 0.01, as vLLM does: smaller ones overflow).
        top_p: nucleus sampling, in (0, 1]; 1 (default) is off.
        top_k: keep the k most likely tokens; 0 (default) is off.
        min_p: drop tokens below ``min_p`` x the top token's probability, in [0, 1]; 0 is off.
        seed: the request's own random generator seed (reproducible whatever its batch mates do); None: random.
        presence_penalty: OpenAI's, in [-2, 2]: subtracted once from the logit of every token already generated.
        frequency_penalty: OpenAI's, in [-2, 2]: subtracted per occurrence of a token already generated.
        repetition_penalty: vLLM / HF's, >= 0.01: logits of prompt and generated tokens divided (positive) or
            multiplied (negative) by it; 1 is off.
        logprobs: None (off), or k >= 0: each output token's log-probability and the k most likely tokens' ones
            (from the raw logits, before penalties and temperature: vLLM's default).
        ignore_eos: keep generating past EOS (and ``stop_token_ids``) up to ``max_tokens``.
        logit_bias: token id -> a number in [-100, 100] added to its logit (OpenAI's ``logit_bias``).
        max_new_tokens: deprecated spelling of ``max_tokens`` (kept for one release; a DeprecationWarning).
    """

    max_tokens: int = 16
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
    stop: tuple[str, ...] = field(default_factory=tuple)  # stop strings (text-level)
    n: int = 1  # outputs per prompt
    # True when max_tokens was given by its vLLM name: LLM.generate then returns RequestOutputs even for lists of
    # token-id lists (the old token-id return is kept for the old spelling, one release). Survives
    # SamplingParams(**p.__dict__) (the server's per-sample copies).
    _vllm_names: bool = field(default=False, repr=False, compare=False)

    def __init__(self, max_tokens=_UNSET, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                 seed: int | None = None, ignore_eos: bool = False, stop_token_ids=(), min_p: float = 0.0,
                 presence_penalty: float = 0.0, frequency_penalty: float = 0.0, repetition_penalty: float = 1.0,
                 logit_bias: dict[int, float] | None = None, logprobs: int | None = None, stop=None, n: int = 1,
                 *, max_new_tokens=_UNSET, _vllm_names: bool = False):
        if max_new_tokens is not _UNSET:
            if max_tokens is not _UNSET and max_tokens != max_new_tokens:
                raise ValueError(f"max_tokens = {max_tokens!r} and max_new_tokens = {max_new_tokens!r}: give one "
                                 f"(max_new_tokens is the deprecated name of max_tokens)")
            warnings.warn("SamplingParams(max_new_tokens=...) is deprecated: use max_tokens (vLLM's name)",
                          DeprecationWarning, stacklevel=2)
            if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
                raise ValueError(f"max_new_tokens = {max_new_tokens!r}: expected an integer >= 0")
            max_tokens = max_new_tokens
        elif max_tokens is not _UNSET:
            _vllm_names = True
        self.max_tokens = 16 if max_tokens is _UNSET else max_tokens
        self.temperature, self.top_k, self.top_p, self.seed = temperature, top_k, top_p, seed
        self.ignore_eos, self.min_p = ignore_eos, min_p
        self.stop_token_ids = tuple(stop_token_ids) if isinstance(stop_token_ids, (list, tuple)) else stop_token_ids
        self.presence_penalty, self.frequency_penalty = presence_penalty, frequency_penalty
        self.repetition_penalty, self.logit_bias, self.logprobs = repetition_penalty, logit_bias, logprobs
        self.stop = () if stop is None else (stop,) if isinstance(stop, str) else \
            tuple(stop) if isinstance(stop, (list, tuple)) else stop
        self.n = n
        self._vllm_names = bool(_vllm_names)
        self.__post_init__()

    @property
    def max_new_tokens(self) -> int:
        """The old name of :attr:`max_tokens` (read by the engine loop; kept one release)."""
        return self.max_tokens

    @max_new_tokens.setter
    def max_new_tokens(self, value: int) -> None:
        self.max_tokens = value

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
        if 0 < self.temperature < MIN_TEMPERATURE:
            # vLLM's rule (vllm/sampling_params.py, _MAX_TEMP): logits / 1e-300 overflow to inf, softmax gives NaN
            # and torch.multinomial raises; so a temperature under the floor is raised to it, with a warning.
            log.warning("temperature %r is below %g, where logits / temperature overflow; using %g",
                        self.temperature, MIN_TEMPERATURE, MIN_TEMPERATURE)
            self.temperature = MIN_TEMPERATURE
        if not is_num(self.top_p) or not 0 < self.top_p <= 1:
            raise bad("top_p", "a number in (0, 1] (1 = off)")
        if not is_int(self.top_k) or self.top_k < 0:
            raise bad("top_k", "an integer >= 0 (0 = off)")
        if not is_int(self.max_tokens) or self.max_tokens < 0:
            raise bad("max_tokens", "an integer >= 0")
        if not isinstance(self.stop, tuple) or not all(isinstance(x, str) and x for x in self.stop):
            raise bad("stop", "a non-empty string or a list of non-empty strings")
        if not is_int(self.n) or self.n < 1:
            raise bad("n", "an integer >= 1")
        if self.seed is not None and (not is_int(self.seed) or not 0 <= self.seed < 2**64):
            raise bad("seed", "an integer in [0, 2**64 - 1] (torch generator seeds are 64-bit)")
        if not isinstance(self.stop_token_ids, tuple) or not all(is_int(t) and t >= 0 for t in self.stop_token_ids):
            raise bad("stop_token_ids", "non-negative integers")
        if not is_num(self.min_p) or not 0 <= self.min_p <= 1:
            raise bad("min_p", "a number in [0, 1] (0 = off)")
        for name in ("presence_penalty", "frequency_penalty"):
            if not is_num(getattr(self, name)) or not -2 <= getattr(self, name) <= 2:
                raise bad(name, "a number in [-2, 2] (0 = off)")
        # Both are applied to the logits before the softmax: a value that overflows float32 there (1e-300 divides a
        # logit to inf, a bias of 1e308 is inf) makes the probabilities NaN, so they are bounded where they still
        # mean something: OpenAI's logit_bias range, and a repetition penalty no smaller than the temperature floor.
        if not is_num(self.repetition_penalty) or self.repetition_penalty < MIN_TEMPERATURE:
            raise bad("repetition_penalty", f"a number >= {MIN_TEMPERATURE:g} (1 = off)")
        if self.logit_bias is not None and not (isinstance(self.logit_bias, dict) and all(
                is_int(k) and k >= 0 and is_num(v) and -MAX_LOGIT_BIAS <= v <= MAX_LOGIT_BIAS
                for k, v in self.logit_bias.items())):
            raise bad("logit_bias", f"a dict of token id -> a number in [-{MAX_LOGIT_BIAS}, {MAX_LOGIT_BIAS}]")
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
           logprobs_out: list | None = None, failures: dict[int, Exception] | None = None) -> list[int | None]:
    """One token per row of ``logits [num_seqs, V]``.

    ``histories``: each row's (prompt, output so far) token ids, for the penalties (rows whose params have none may
    be anything). ``logprobs_out``: when a list, one entry per row is appended: None, or for params with
    ``logprobs = k`` a tuple ``(sampled token's logprob, [(token id, logprob)] of the k most likely tokens)``.
    ``failures``: when a dict, a row whose sampling raises (non-finite probabilities) gets None and its error under
    its row index, and the other rows are sampled as if it were not there (each from its own generator); without
    it the error propagates."""
    logits = logits.float()
    raw = logits
    if histories is not None and any(p.logit_bias or p.repetition_penalty != 1.0 or p.frequency_penalty
                                     or p.presence_penalty for p in params):
        logits = torch.stack([apply_penalties(logits[i], p, *histories[i]) for i, p in enumerate(params)])
    greedy = [p.temperature == 0 for p in params]
    out: list = logits.argmax(-1).tolist() if any(greedy) else [0] * len(params)
    for i, p in enumerate(params):
        if greedy[i]:
            continue
        try:
            row = filter_logits(logits[i] / p.temperature, p.top_k, p.top_p)
            probs = row.softmax(-1)
            if p.min_p:
                probs = probs.masked_fill(probs < p.min_p * probs.max(), 0.0)
            out[i] = int(torch.multinomial(probs, 1, generator=generators[i]).item())
        except RuntimeError as e:  # torch refuses non-finite probabilities: this row's failure, not the batch's
            if failures is None:
                raise
            failures[i], out[i] = e, None
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
            if out[i] is None:  # its sampling failed
                logprobs_out.append(None)
                continue
            top = torch.topk(row, min(p.logprobs, row.shape[-1])) if p.logprobs else None
            logprobs_out.append((float(row[out[i]]), [] if top is None else
                                 list(zip(top.indices.tolist(), top.values.tolist()))))
    return out
