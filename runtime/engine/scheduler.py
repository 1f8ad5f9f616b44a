"""Continuous batching over the paged KV cache: admission, block allocation, the step, preemption, release.

One step = one model call. Waiting requests are admitted while their prompts fit in free KV blocks; every running
request then feeds its uncomputed tokens (a prompt, a prompt chunk, or the last sampled token), within a per-step
token budget (``max_num_batched_tokens``) that splits long prompts into chunks. On the rocm target prefill chunks
and decodes share a step; on neuron a step is all prefill or all decode (separate graphs). When a decode needs a
block and none is free, the most recently admitted request is preempted (its blocks freed, its tokens recomputed
later).

Failures are per request where the request is the cause, so one request never fails the others in flight:

* a request that can never fit the KV cache (its prompt plus ``max_tokens``) is refused when it is submitted
  (:class:`RequestTooLargeError`, a ValueError: the server answers 400) -- nothing of the batch is admitted;
* a request whose sampling fails (non-finite probabilities: ``torch.multinomial`` raises), or that cannot be
  scheduled after all (it outgrew the cache or the step budget after a preemption), ends alone: :meth:`fail`
  gives it its own error (``Request.error``), frees its resources and hands it back among the step's emitted
  requests; the others go on with the tokens they would get without it (each request samples from its own
  generator).

A failure of the step itself (the model call, a kernel, the block allocator) is no request's fault: it is raised to
the caller, which fails every request in flight (``LLM``'s loop releases them all; the server posts the error to
each).

The speculative decoder (runtime/engine/speculative.py) and pipelined decode (runtime/engine/pipelined.py) run
their own steps on this scheduler's public methods: :meth:`admit`, :meth:`ensure_decode_blocks`, :meth:`emit`,
:meth:`append_token`, :meth:`fail`, :meth:`release`.
"""
from __future__ import annotations

import operator
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from ..block_manager import CacheFullError
from .model_build import LoadedModel
from .pipelined import PipelinedDecode
from ..work import Work
from .sampler import SamplingParams, sample


class RequestTooLargeError(CacheFullError, ValueError):
    """A request that can never fit the KV cache, even alone: refused at submission (a ValueError: the request's
    fault, HTTP 400 in the server; a CacheFullError, as before)."""


class RequestError(RuntimeError):
    """A request that failed alone while its batch went on (``Request.error`` is the cause). The Python API raises it
    after the batch has finished; ``outputs`` then holds every output of the call, the failed ones with finish
    reason ``"error"``."""

    def __init__(self, message: str, outputs: list | None = None):
        super().__init__(message)
        self.outputs = outputs


class SamplingError(RequestError):
    """A request's token could not be sampled (its probabilities were not finite)."""


def sampling_error(r: "Request", cause: Exception) -> SamplingError:
    error = SamplingError(f"request {r.seq_id}: sampling failed (temperature {r.params.temperature!r}): "
                          f"{str(cause).splitlines()[0] if str(cause) else type(cause).__name__}")
    error.__cause__ = cause
    return error


@dataclass(eq=False)  # identity comparison: the scheduler's list membership tests stay O(1) per element
class Request:
    seq_id: int
    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    output: list[int] = field(default_factory=list)
    computed: int = 0  # tokens whose K/V are in the cache
    done: bool = False
    tokens: list[int] = field(default_factory=list)  # prompt + output, grown in place (no per-step concatenation)
    finish_reason: str | None = None  # "stop" (EOS / stop token), "length" (max_tokens) or "error" once done
    # perf_counter() times: submission, first sampled token, completion (per-request stats of the text API)
    t_submit: float = 0.0
    t_first: float | None = None
    t_done: float | None = None
    logprobs: list = field(default_factory=list)  # params.logprobs set: one (logprob, top) per output token (sampler)
    t_admit: float | None = None  # first admission into the running batch (RequestStats.queued_s)
    preemptions: int = 0
    stop_reason: str | int | None = None  # the stop string / stop token id that ended it
    stop_text: str | None = None  # params.stop: the decoded output cut before the stop string that ended it
    stop_scanned: int = 0  # params.stop: characters of decoded output already searched for the stop strings
    error: BaseException | None = None  # why it failed alone (Scheduler.fail); finish_reason is then "error"

    def __post_init__(self) -> None:
        self.tokens = list(self.prompt) + list(self.output)
        self.t_submit = time.perf_counter()

    def append(self, token: int) -> None:
        self.output.append(token)
        self.tokens.append(token)


@dataclass
class GenerateStats:
    prefill_tokens: int = 0
    decode_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    steps: int = 0
    preemptions: int = 0
    speculative: object | None = None  # SpeculativeStats when LLM(speculative_tokens=K)

    def as_dict(self) -> dict:
        out = {
            **self.__dict__,
            "decode_tokens_per_s": self.decode_tokens / self.decode_s if self.decode_s else None,
            "prefill_tokens_per_s": self.prefill_tokens / self.prefill_s if self.prefill_s else None,
        }
        spec = out.pop("speculative")
        if spec is not None:  # acceptance_rate, mean_accepted_tokens at the top; the rest under "speculative"
            out["speculative"] = spec.as_dict()
            out["acceptance_rate"] = out["speculative"]["acceptance_rate"]
            out["mean_accepted_tokens"] = out["speculative"]["mean_accepted_tokens"]
        return out


class Scheduler:
    """The continuous-batching loop of one engine over a :class:`LoadedModel` (module docstring).

    ``tokenizer``: returns the checkpoint's tokenizer or None (read at first use); stop strings need it."""

    def __init__(self, loaded: LoadedModel, tokenizer: Callable[[], object | None]):
        self.blocks, self.state_pool, self.runner = loaded.blocks, loaded.state_pool, loaded.runner
        self.device, self.vocab_size, self.eos_ids = loaded.device, loaded.vocab_size, loaded.eos_ids
        self.max_model_len, self.max_num_seqs = loaded.max_model_len, loaded.max_num_seqs
        self.max_num_batched_tokens = loaded.budget.max_num_batched_tokens
        self.chunked_prefill = loaded.budget.chunked_prefill
        self._tokenizer = tokenizer
        # Per-request resources, each released by seq id (idempotent, a no-op for ids that hold nothing): every exit
        # of generate/score calls all of them, so another kind of per-request state (a recurrent-state slot, an
        # on-device sampling slot, a request's drafts) is one more entry here.
        self.releasers: tuple[Callable[[int], None], ...] = (self.blocks.release,)
        if self.state_pool is not None:
            self.releasers += (self.state_pool.free,)
        self.speculative = None  # attach_speculative()
        self.stats = GenerateStats()
        self.next_id = 0
        self._failed: list[Request] = []  # requests failed alone during the current step (fail())
        self.pipelined = PipelinedDecode(self) if PipelinedDecode.applies(self) else None

    def attach_speculative(self, decoder) -> None:
        """Steps draft and verify through ``decoder`` (a SpeculativeDecoder built on this scheduler)."""
        self.speculative = decoder
        self.releasers += (decoder.release,)
        self.pipelined = None  # speculative steps are not pipelined

    # -------------------------------------------------------------------------------------------- submission
    def checked_prompt(self, index: int, prompt) -> list[int]:
        """The prompt as a list of ints; a ValueError naming the prompt and token unless every id is in the vocab."""
        ids = list(prompt)
        if not ids:
            raise ValueError(f"prompt {index} is empty")
        for pos, t in enumerate(ids):
            try:  # Python, numpy and 0-d torch integers (anything with __index__); not floats or bools
                v = operator.index(t) if not isinstance(t, bool) else None
            except TypeError:
                v = None
            if v is None or not 0 <= v < self.vocab_size:
                raise ValueError(
                    f"prompt {index}: token id {t!r} at position {pos} is outside the vocabulary: expected an integer "
                    f"in [0, {self.vocab_size - 1}] (vocab_size {self.vocab_size})"
                )
            ids[pos] = v
        return ids

    def make_requests(self, prompts: list[list[int]],
                      params: SamplingParams | list[SamplingParams]) -> list[Request]:
        """Validated requests (nothing admitted yet): ValueError naming the prompt for an empty / out-of-vocab prompt
        or one that cannot fit with its max_tokens (max_model_len; :class:`RequestTooLargeError` for the KV cache).
        Every request is checked before any is made: a bad one refuses the whole call."""
        plist = params if isinstance(params, list) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(plist)} SamplingParams")
        checked = [self.checked_prompt(i, prompt) for i, prompt in enumerate(prompts)]
        if any(p.stop for p in plist) and self._tokenizer() is None:
            raise ValueError(f"stop = {next(p.stop for p in plist if p.stop)!r}: stop strings need the checkpoint's "
                             f"tokenizer.json (the checkpoint has none); use stop_token_ids")
        if any(p.n != 1 for p in plist):
            raise ValueError("n > 1: use generate() / complete() / chat(), which expand it into n requests")
        for i, (prompt, p) in enumerate(zip(checked, plist)):
            if len(prompt) + p.max_new_tokens > self.max_model_len:
                raise ValueError(
                    f"prompt {i} ({len(prompt)} tokens) + max_new_tokens ({p.max_new_tokens}) exceeds max_model_len "
                    f"{self.max_model_len}"
                )
            self._check_fits(i, len(prompt), p.max_new_tokens)
        reqs = []
        for prompt, p in zip(checked, plist):
            gen = None
            if p.temperature > 0:
                gen = torch.Generator(device=self.device)
                gen.manual_seed(p.seed if p.seed is not None else torch.seed())
            r = Request(self.next_id, prompt, p, gen, done=p.max_new_tokens == 0)
            if r.done:
                r.finish_reason, r.t_done = "length", r.t_submit
            reqs.append(r)
            self.next_id += 1
        if getattr(self.runner, "on_device_sampling", False):
            # The graph samples from the device RNG (one stream for the whole batch): a seed makes the run
            # reproducible, not each request independent of its batch mates as the host sampler's generators do.
            seeds = [p.seed for p in plist if p.temperature > 0 and p.seed is not None]
            if seeds:
                torch.manual_seed(seeds[0])
        return reqs

    def _check_fits(self, index: int, prompt_len: int, max_tokens: int) -> None:
        """Refuse a request whose K/V can never fit the cache, even alone: it would otherwise wait forever or fail
        mid-run. Its largest step feeds the token before its last one: prompt + max_tokens - 1 cached tokens (the
        last sampled token is never fed)."""
        if max_tokens == 0:
            return  # finished at submission: never admitted
        need = self.blocks.blocks_needed(prompt_len + max_tokens - 1)
        if need > self.blocks.num_blocks:
            raise RequestTooLargeError(
                f"prompt {index} ({prompt_len} tokens + max_tokens {max_tokens}) needs {need} KV blocks but the cache "
                f"has only {self.blocks.num_blocks}; raise num_blocks or shorten the prompt / max_tokens"
            )
        if not self.chunked_prefill and self.max_num_batched_tokens is not None \
                and prompt_len > self.max_num_batched_tokens:
            raise ValueError(f"prompt {index}: {prompt_len} prompt tokens exceed the {self.max_num_batched_tokens}-"
                             f"token step budget and chunked prefill is off")

    # ------------------------------------------------------------------------------------------------- the loop
    def run(self, reqs: list[Request]) -> Iterator[list[Request]]:
        """The continuous-batching loop as a generator: one engine step per iteration, yielding the requests that
        sampled a token in it or failed alone. Its ``finally`` releases every request's resources whether the loop
        ends, raises, or the consumer stops iterating (``close()`` on an abandoned stream raises GeneratorExit at
        the yield)."""
        waiting = [r for r in reqs if not r.done]
        running: list[Request] = []
        self.reset_stats()
        try:
            stops = any(r.params.stop for r in reqs)
            while waiting or running:
                emitted = self.step(waiting, running)
                if stops and emitted:
                    self.apply_stop_strings(emitted, running)
                yield emitted
        finally:
            if self.pipelined is not None:
                self.pipelined.drop()  # a step still in flight: its tokens are not needed any more
            # Finished requests released theirs already; this frees what a failure left behind.
            self.release_all([r.seq_id for r in reqs])

    def reset_stats(self) -> None:
        self.stats = GenerateStats()
        if self.speculative is not None:
            self.speculative.reset_stats()
            self.stats.speculative = self.speculative.stats

    def step(self, waiting: list[Request], running: list[Request]) -> list[Request]:
        """One engine step over the caller's ``waiting`` / ``running`` lists (admitted requests move from one to the
        other, finished and failed ones leave both). Returns the requests that got a token and those that failed
        alone in it (``error`` set). Raises when the step itself fails."""
        try:
            if self.speculative is not None:  # draft + verify steps
                emitted = self.speculative.step(waiting, running)
            else:
                # pipelined: greedy decode steps launched one ahead of reading their tokens (None: not now)
                emitted = self.pipelined.step(waiting, running) if self.pipelined is not None else None
                if emitted is None:
                    emitted = self._step(waiting, running)
        except BaseException:
            # Requests that failed alone earlier in this step go back to `running`, so that whoever handles the
            # step's failure (every request in flight fails) reaches them too.
            running.extend(self._failed)
            self._failed = []
            raise
        failed, self._failed = self._failed, []
        return emitted + failed if failed else emitted

    def _step(self, waiting: list[Request], running: list[Request]) -> list[Request]:
        running.extend(self.admit(waiting, running))
        prefilling = [r for r in running if len(r.tokens) - r.computed > 1]
        if prefilling and not self.runner.mixes_prefill_and_decode:
            candidates = prefilling  # neuron: a step is all prefill or all decode
        else:
            self.ensure_decode_blocks(waiting, running)
            candidates = list(running)
        # Each request feeds its uncomputed tokens; a token budget splits long prompts into chunks (chunked prefill).
        work: list[Work] = []
        batch: list[Request] = []
        budget = self.max_num_batched_tokens
        for r in candidates:
            n = len(r.tokens) - r.computed
            if budget is not None:
                if n > budget and not self.chunked_prefill:
                    if not work:  # recomputing a preempted request: its prompt + output outgrew the budget
                        self.fail(r, ValueError(f"request {r.seq_id}: {n} tokens to recompute exceed the {budget}-"
                                                f"token step budget and chunked prefill is off"), waiting, running)
                        continue
                    break  # whole prompts only: it waits for the next step
                n = min(n, budget)
                if n <= 0:
                    break
                budget -= n
            work.append(Work(r.seq_id, r.tokens[r.computed : r.computed + n], r.computed))
            batch.append(r)
        if not work:
            if waiting and not running:
                raise CacheFullError("no request fits in the KV cache")
            return []
        # Only requests whose prompt is now complete sample a token; a partial chunk's logits are dropped.
        finishing = [r.computed + len(w.token_ids) == len(r.tokens) for r, w in zip(batch, work)]
        t0 = time.perf_counter()
        tokens, failures = self._model_step(work, batch, finishing)
        dt = time.perf_counter() - t0
        if any(len(w.token_ids) > 1 for w in work):
            self.stats.prefill_tokens += sum(len(w.token_ids) for w in work)
            self.stats.prefill_s += dt
        else:
            self.stats.decode_tokens += len(work)
            self.stats.decode_s += dt
        self.stats.steps += 1
        for i, error in failures.items():  # sampling failed: that request alone ends
            self.fail(batch[i], error, waiting, running)
        kept = [i for i in range(len(batch)) if i not in failures]
        return self.emit([batch[i] for i in kept], [len(work[i].token_ids) for i in kept], [tokens[i] for i in kept],
                         [finishing[i] for i in kept], running)

    def _model_step(self, work: list[Work], batch: list[Request],
                    finishing: list[bool]) -> tuple[list[int | None], dict[int, SamplingError]]:
        """The model call and each finishing row's token (None for the others), with the rows whose sampling failed
        (batch index -> its error)."""
        tokens: list[int | None] = [None] * len(batch)
        rows = [i for i, fin in enumerate(finishing) if fin]
        greedy = all(batch[i].params.temperature == 0 and not batch[i].params.uses_logits for i in rows)
        if getattr(self.runner, "on_device_sampling", False):
            return self.runner.step_sample(work, [r.params for r in batch]), {}
        if rows and greedy and getattr(self.runner, "remote_greedy", False):
            # pipeline stages / attention DP: the argmax runs where the logits are, only the ids reach rank 0
            return self.runner.step_greedy(work), {}
        logits = self.runner.step(work)
        if rows and greedy:
            return logits.argmax(-1).tolist(), {}  # greedy on the device; one transfer of the ids
        failures: dict[int, SamplingError] = {}
        if rows:
            # penalties / min-p / logprobs (SamplingParams.uses_logits) need each row's history and its logits
            lps: list = []
            row_errors: dict[int, Exception] = {}
            picked = sample(logits[rows], [batch[i].params for i in rows], [batch[i].generator for i in rows],
                            histories=[(batch[i].prompt, batch[i].output) for i in rows], logprobs_out=lps,
                            failures=row_errors)
            for j, (i, tok, lp) in enumerate(zip(rows, picked, lps)):
                tokens[i] = tok
                if j in row_errors:
                    failures[i] = sampling_error(batch[i], row_errors[j])
                elif lp is not None:
                    batch[i].logprobs.append(lp)
        return tokens, failures

    # ---------------------------------------------------------------------------------- admission, blocks, release
    def admit(self, waiting: list[Request], running: list[Request]) -> list[Request]:
        """Move waiting requests (oldest first) into the batch while their prompts' blocks (and state slots) are free
        and fewer than ``max_num_seqs`` run; returns the admitted ones (the caller adds them to ``running``)."""
        admitted = []
        while waiting and len(running) + len(admitted) < self.max_num_seqs:
            r = waiting[0]
            need = len(r.tokens)
            if self.blocks.blocks_needed(need) > self.blocks.num_blocks:  # refused at submission; never expected
                self.fail(r, RequestTooLargeError(
                    f"request {r.seq_id} needs {self.blocks.blocks_needed(need)} KV blocks but the cache has only "
                    f"{self.blocks.num_blocks}; raise num_blocks or shorten the prompt"), waiting, running)
                continue
            if not self.blocks.can_allocate(r.seq_id, need):
                break
            if self.state_pool is not None and not self.state_pool.can_allocate(r.seq_id):
                break
            self.blocks.ensure(r.seq_id, need)
            if self.state_pool is not None:
                self.state_pool.allocate(r.seq_id)  # zeroed: a (re)admitted request starts from an empty state
            if r.t_admit is None:
                r.t_admit = time.perf_counter()
            admitted.append(waiting.pop(0))
        return admitted

    def _preempt(self, waiting: list[Request], running: list[Request]) -> None:
        victim = running.pop()  # most recently admitted
        self.release(victim.seq_id)
        victim.computed = 0
        victim.preemptions += 1
        waiting.insert(0, victim)
        self.stats.preemptions += 1

    def ensure_decode_blocks(self, waiting: list[Request], running: list[Request]) -> None:
        """Give every decoding request a slot for its next token, preempting the newest requests if blocks run out."""
        tables, block_size = self.blocks.tables, self.blocks.block_size
        for r in list(running):
            table = tables.get(r.seq_id)
            if table is not None and len(table) * block_size >= len(r.tokens):
                continue  # the common case: the slot is already allocated (always so mid-prefill)
            while r in running and not self.blocks.can_allocate(r.seq_id, len(r.tokens)):
                if len(running) == 1:  # refused at submission unless the layout shrank the cache; never expected
                    self.fail(r, CacheFullError(f"request {r.seq_id} alone exceeds the KV cache "
                                                f"({self.blocks.num_blocks} blocks)"), waiting, running)
                    break
                self._preempt(waiting, running)
            if r in running:
                self.blocks.ensure(r.seq_id, len(r.tokens))

    def emit(self, batch: list[Request], fed: list[int], tokens: list[int | None], finishing: list[bool],
             running: list[Request]) -> list[Request]:
        """Advance each request by its ``fed`` tokens and append its new token where ``finishing``; finished requests
        leave ``running`` and release their resources. Returns the requests that got a token."""
        now = time.perf_counter()
        emitted = []
        for r, n, tok, fin in zip(batch, fed, tokens, finishing):
            r.computed += n
            if not fin:
                continue
            emitted.append(r)
            if self.append_token(r, tok, now):
                running.remove(r)
                self.release(r.seq_id)
        return emitted

    def append_token(self, r: Request, tok: int, now: float) -> bool:
        """Append one sampled token to ``r``; True when it ends ``r`` (EOS or a stop token unless ``ignore_eos``, or
        ``max_tokens``), its finish reason and time then set (the caller takes it out of the batch)."""
        r.append(tok)
        if r.t_first is None:
            r.t_first = now
        stop = (tok in self.eos_ids or tok in r.params.stop_token_ids) and not r.params.ignore_eos
        if not (stop or len(r.output) >= r.params.max_new_tokens):
            return False
        r.done, r.finish_reason, r.t_done = True, "stop" if stop else "length", now
        if stop and tok not in self.eos_ids:
            r.stop_reason = tok
        return True

    def fail(self, r: Request, error: BaseException, waiting: list[Request], running: list[Request]) -> None:
        """End ``r`` alone with ``error``: out of ``waiting`` / ``running``, its resources freed; the current
        :meth:`step` returns it among the emitted requests (``r.error`` set, finish reason ``"error"``)."""
        r.error, r.done, r.finish_reason, r.t_done = error, True, "error", time.perf_counter()
        for lst in (waiting, running):
            if r in lst:
                lst.remove(r)
        self.release(r.seq_id)
        self._failed.append(r)

    def release(self, seq_id: int) -> None:
        for release in self.releasers:
            release(seq_id)

    def release_all(self, seq_ids: list[int]) -> None:
        """Release every resource of every id, even if one release fails (the first such error is re-raised)."""
        first: BaseException | None = None
        for seq_id in seq_ids:
            for release in self.releasers:
                try:
                    release(seq_id)
                except Exception as e:  # keep freeing the rest; a leak elsewhere would make the instance unusable
                    first = first or e
        if first is not None:
            raise first

    # ----------------------------------------------------------------------------------------------- stop strings
    def apply_stop_strings(self, emitted: list[Request], running: list[Request]) -> None:
        """End each request whose decoded output now contains one of its ``params.stop`` strings (as the server's
        stop strings do: checked between steps; the text is cut before the match, the tokens are kept)."""
        tok = self._tokenizer()
        for r in emitted:
            if not r.params.stop or r.stop_text is not None or r.error is not None:
                continue
            text = tok.decode(r.output)
            start = max(0, r.stop_scanned - max(len(x) for x in r.params.stop) + 1)
            hits = [(k, x) for x in r.params.stop if (k := text.find(x, start)) >= 0]
            r.stop_scanned = len(text)
            if not hits:
                continue
            k, which = min(hits)
            r.stop_text, r.stop_reason, r.finish_reason = text[:k], which, "stop"
            if not r.done:
                r.done, r.t_done = True, time.perf_counter()
                if r in running:
                    running.remove(r)
                self.release(r.seq_id)

    # ---------------------------------------------------------------------------------------------------- scoring
    def score(self, prompt: list[int]) -> torch.Tensor:
        """Teacher-forced logits ``[len(prompt), V]`` of one prompt (a single prefill through the paged cache)."""
        prompt = self.checked_prompt(0, prompt)
        if len(prompt) > self.max_model_len:
            raise ValueError(f"prompt 0 has {len(prompt)} tokens, more than max_model_len {self.max_model_len}")
        seq_id = self.next_id
        self.next_id += 1
        try:
            self.blocks.ensure(seq_id, len(prompt))
            if self.state_pool is not None:
                self.state_pool.allocate(seq_id)
            return self.runner.step([Work(seq_id, prompt, 0)], all_positions=True)
        finally:
            self.release_all([seq_id])
