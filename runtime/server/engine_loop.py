"""The engine loop beside the HTTP layer: one thread runs the LLM's continuous-batching step over an open set of
requests; HTTP handlers (on the asyncio loop) submit requests and read their tokens from an asyncio queue.

Requests join the waiting list and leave the running list between steps (the same ``LLM._step`` as ``generate``), so
concurrent HTTP requests share batches. A cancelled request (client gone, stop string matched) is dropped between
steps and its KV blocks released.

Failures are per request where the request is the cause (engine/scheduler.py): a request whose sampling fails, or
that can no longer be scheduled, comes back from the step alone with its own ``error``; only its handler gets that
error, and the other requests go on. A failure of the step itself (the model call, a kernel, the block allocator)
is no request's fault and is raised out of the step: then every request of that step (waiting and running) gets the
error and its blocks are released. Either way the loop keeps serving."""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

from ..engine.llm import LLM
from ..engine.sampler import SamplingParams


class QueueFull(Exception):
    """More requests waiting than the server accepts (HTTP 503)."""


class ShuttingDown(RuntimeError):
    """The server is stopping: new requests are refused and, after the grace period, running ones aborted (503)."""


@dataclass(eq=False)
class Handle:
    request: object  # the engine's _Request
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)  # (token ids, finish_reason | None) or an Exception
    cancelled: bool = False
    sent: int = 0  # output tokens already posted (a step emits several when speculative drafts were accepted)


class EngineLoop:
    def __init__(self, llm: LLM, max_waiting: int = 256):
        self.llm = llm
        self.max_waiting = max_waiting
        self._lock = threading.Condition()
        self._incoming: list[Handle] = []
        self._cancelled: list[Handle] = []
        self._live: dict[int, Handle] = {}  # seq id -> handle, for every request the loop holds
        self._stopping = False
        self._aborting = False  # abort_all(): every request in flight gets ShuttingDown, the loop keeps running
        self._draining = False  # begin_shutdown(): new requests are refused
        self.aborted = 0  # requests cancelled before they finished (client gone, stop string): /health reports it
        self._thread = threading.Thread(target=self._run, name="modelgen-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------------------- HTTP side (async)
    def submit(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[Handle]:
        """Validated requests (ValueError for a bad prompt / too long), queued for the next step."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._draining or self._stopping:
                raise ShuttingDown("the server is shutting down")
            if len(self._incoming) + len(self._live) + len(prompts) > self.max_waiting + self.llm.max_num_seqs:
                raise QueueFull(f"{len(self._live) + len(self._incoming)} requests in flight; the server accepts "
                                f"{self.max_waiting + self.llm.max_num_seqs}")
            reqs = self.llm._make_requests(prompts, params)  # ids are taken under the lock
            handles = [Handle(r, loop) for r in reqs]
            self._incoming.extend(handles)
            self._lock.notify()
        return handles

    def cancel(self, handle: Handle) -> None:
        with self._lock:
            if not handle.cancelled:
                handle.cancelled = True
                self._cancelled.append(handle)
                self._lock.notify()

    def begin_shutdown(self) -> None:
        """Refuse new requests (503); those in flight keep running."""
        with self._lock:
            self._draining = True

    def abort_all(self) -> None:
        """End every request in flight now: each gets a ShuttingDown event (a stream's error event, a 503) and its
        blocks are freed between steps. Thread-safe; the loop keeps running."""
        with self._lock:
            self._draining = self._aborting = True
            self._lock.notify()

    def in_flight(self) -> int:
        with self._lock:
            return len(self._live) + len(self._incoming)

    def shutdown(self) -> None:
        """Stop after the current step; requests still in flight get a 'server shutting down' error."""
        with self._lock:
            self._stopping = True
            self._lock.notify()
        self._thread.join(timeout=30)

    def status(self) -> dict:
        blocks = self.llm.blocks
        with self._lock:
            return {"requests_in_flight": len(self._live) + len(self._incoming), "requests_aborted": self.aborted,
                    "kv_blocks_free": blocks.num_free, "kv_blocks_total": blocks.num_blocks}

    # ------------------------------------------------------------------------------------------ engine thread
    def _post(self, handle: Handle, event) -> None:
        handle.loop.call_soon_threadsafe(handle.events.put_nowait, event)

    def _run(self) -> None:
        waiting: list = []
        running: list = []
        llm = self.llm
        while True:
            with self._lock:
                while not (self._incoming or self._cancelled or waiting or running or self._stopping
                           or self._aborting):
                    self._lock.wait()
                if self._stopping:
                    break
                if self._aborting:
                    self._aborting = False
                    self._cancelled.extend(h for h in self._incoming if not h.cancelled)
                    self._incoming.clear()
                    error = ShuttingDown("the server is shutting down: request aborted")
                    for h in self._cancelled + list(self._live.values()):
                        self._post(h, error)
                    self._cancelled.extend(h for h in self._live.values() if h not in self._cancelled)
                for h in self._incoming:
                    if h.request.done:  # max_tokens 0: nothing to run
                        self._post(h, ([], "length"))
                    elif not h.cancelled:
                        self._live[h.request.seq_id] = h
                        waiting.append(h.request)
                self._incoming.clear()
                cancelled, self._cancelled = self._cancelled, []
            for h in cancelled:
                r = h.request
                if not r.done:
                    self.aborted += 1
                for lst in (waiting, running):
                    if r in lst:
                        lst.remove(r)
                llm._release_all([r.seq_id])
                self._live.pop(r.seq_id, None)
            if not (waiting or running):
                continue
            try:
                emitted = llm._step(waiting, running)
            except Exception as e:  # fail everything in flight, free it all, keep serving
                for r in waiting + running:
                    h = self._live.pop(r.seq_id, None)
                    if h is not None:
                        self._post(h, e)
                llm._release_all([r.seq_id for r in waiting + running])
                waiting.clear()
                running.clear()
                continue
            for r in emitted:
                h = self._live.get(r.seq_id)
                if h is None:
                    continue
                if r.error is not None:  # it failed alone (engine/scheduler.py): its own error, the others go on
                    self._live.pop(r.seq_id, None)
                    self._post(h, r.error)
                    continue
                # Every token since the last post, not just the last one: a speculative step (LLM(speculative_tokens=K))
                # emits the accepted drafts and the target's own token at once (LLM.stream tracks the same count).
                new = r.output[h.sent:]
                h.sent += len(new)
                self._post(h, (new, r.finish_reason if r.done else None))
                if r.done:
                    self._live.pop(r.seq_id, None)
        error = ShuttingDown("the server is shutting down")
        for h in list(self._live.values()):
            self._post(h, error)
        llm._release_all([r.seq_id for r in waiting + running])
