"""Pipelined greedy decode: launch decode step n + 1 before reading step n's tokens.

Why: a plain engine step launches the model, waits for the tokens (a device-to-host read), then does its host work
-- append the tokens, check stops, prepare the next step's inputs (and, under tensor parallelism, send them to the
follower ranks, who then prepare their own) -- while the GPU idles. Measured on H200s (bench/tp.py --profile-steps,
Llama-3-8B shape, batch 1): 0.08 ms of a 4.25 ms step at TP=1 and 0.22 ms of a 3.25 ms step at TP=2 were such idle
host time, and on the 0.77 ms MoE step of bench/tp.py's Qwen3-30B-A3B leg 0.11 ms. vLLM's async scheduling and
SGLang's overlap scheduler remove it the same way: greedy decode's next input is the argmax the step just computed,
so it can stay on the device.

How: every decode step of a steady greedy batch goes through the runner's ``step_greedy_async``, which writes each
row's argmax into the runner's ``chain`` buffer and queues its copy to the host. The next step is launched right away,
its input ids naming the previous step's rows (``runtime/ops/tokens.py``: id ``-1 - r`` = ``chain[r]``), its
positions one further and its KV slots allocated ahead; only then are the previous step's tokens read, appended and
checked. A request whose previous token was a stop token had one step too many launched: that row's output is
dropped (its KV write landed in blocks it still held when the step was queued; later users of those blocks are queued
after it on the same stream). A request that reaches ``max_new_tokens`` is never launched past it.

When it applies: greedy sampling (temperature 0) for every running request, every one of them decoding (no prompt
left to prefill), no request waiting for admission, KV blocks available for one more token each, a runner with
``step_greedy_async`` (rocm, also under engine-started TP/EP; not pipeline stages or attention DP), no speculative
decoding, ``MODELGEN_PIPELINED_DECODE`` not ``0``. Otherwise the step in flight is read (a step on its own) and the
plain step runs. Tokens are identical to the plain path's: the same logits, the same argmax, only read later.
"""
from __future__ import annotations

import time

from modelgen import settings

from ..work import Work
from ..ops.tokens import from_chain


class PipelinedDecode:
    def __init__(self, scheduler):
        self.scheduler = scheduler  # runtime/engine/scheduler.py: its blocks, runner, emit() and stats
        self.inflight = None  # (GreedyStep handle of the launched, unread step, the requests of its rows)

    @staticmethod
    def applies(scheduler) -> bool:
        # ``async_greedy`` is each runner's own say (wrappers forward attributes to the runner they wrap, so a
        # wrapper that cannot pipeline -- attention DP -- sets it False itself); runners that compute greedy ids
        # remotely (pipeline stages, attention DP) never pipeline.
        runner = scheduler.runner
        return (settings.get("MODELGEN_PIPELINED_DECODE") and scheduler.speculative is None
                and getattr(runner, "async_greedy", False) is True and not getattr(runner, "remote_greedy", False)
                and callable(getattr(type(runner), "step_greedy_async", None)))

    def drop(self) -> None:
        self.inflight = None

    # -------------------------------------------------------------------------------------------------------- step
    def step(self, waiting: list, running: list) -> list | None:
        """One engine step (the requests that got a token), or None when the plain step should run instead."""
        sched = self.scheduler
        t0 = time.perf_counter()
        if self.inflight is None:
            if not self._steady(waiting, running):
                return None
            sched.ensure_decode_blocks(waiting, running)  # may preempt: then the plain path takes over
            if waiting or not running:
                return None
            self._launch([Work(r.seq_id, [r.tokens[-1]], r.computed) for r in running], list(running))
        handle, batch = self.inflight
        # Rows whose request stopped after this step was launched (a stop token in the step before), or left the
        # engine meanwhile (a server's cancellation, a failed step): dropped.
        current = {id(r) for r in running}
        live = [not r.done and id(r) in current for r in batch]
        # Launch the next step before reading this one's tokens, unless the next step needs the plain path.
        nxt = [r for r, ok in zip(batch, live) if ok and len(r.output) + 1 < r.params.max_new_tokens]
        self.inflight = None
        if nxt and self._steady(waiting, nxt) and self._reserve(nxt):
            rows = {id(r): i for i, r in enumerate(batch)}
            self._launch([Work(r.seq_id, [from_chain(rows[id(r)])], r.computed + 1) for r in nxt], nxt)
        tokens = handle.tokens()
        kept = [r for r, ok in zip(batch, live) if ok]
        emitted = sched.emit(kept, [1] * len(kept), [t for t, ok in zip(tokens, live) if ok], [True] * len(kept),
                            running)
        sched.stats.decode_tokens += len(kept)
        sched.stats.decode_s += time.perf_counter() - t0
        sched.stats.steps += 1
        return emitted

    # --------------------------------------------------------------------------------------------------- internals
    def _steady(self, waiting: list, running: list) -> bool:
        """Every running request greedy and decoding, none waiting."""
        return not waiting and bool(running) and all(
            r.params.temperature == 0 and not r.params.uses_logits and not r.done and len(r.tokens) - r.computed == 1 for r in running)

    def _reserve(self, nxt: list) -> bool:
        """KV slots for each request's token after the one in flight; False (nothing allocated) if they don't all
        fit."""
        blocks = self.scheduler.blocks
        need = [(r.seq_id, len(r.tokens) + 1) for r in nxt]
        more = sum(max(0, blocks.blocks_needed(n) - len(blocks.tables.get(seq_id, ()))) for seq_id, n in need)
        if more > blocks.num_free:
            return False
        for seq_id, n in need:
            blocks.ensure(seq_id, n)
        return True

    def _launch(self, work: list[Work], batch: list) -> None:
        self.inflight = (self.scheduler.runner.step_greedy_async(work), batch)
