"""Batched staging of per-expert checkpoint tensors into fused expert parameters (ATOM-style expert loading).

Checkpoints store one matrix per expert and projection (``...experts.7.gate_proj.weight``); the runtime keeps all
experts of a layer in one tensor (``w13 [E, 2I, H]``, ``w2 [E, H, I]``, see ``runtime/layers/moe/ops.py``). Copying each
expert into its slice one by one costs ``E * shards`` small copies per layer; ``ExpertStager`` instead collects the
tensors of one fused parameter, reads lazy ones on a thread pool, and once every ``(expert, shard)`` is present
stacks each shard (one allocation) and hands the stacked tensors to ``on_complete``, which copies them in once.

How a model's weight loader uses it (one stager per fused parameter, per layer)::

    def fill_w13(stacked):                       # {"w1": [E, I, H], "w3": [E, I, H]}
        w13.data.copy_(torch.cat([stacked["w1"], stacked["w3"]], dim=1))   # gate rows first, then up

    stager = ExpertStager(num_local_experts, ("w1", "w3"), fill_w13, name="model.layers.3.mlp.experts.w13_weight",
                          per_expert_loader=lambda e, s, t: w13.data[e, (0 if s == "w1" else I):][:I].copy_(t))
    for key in checkpoint keys of that layer:    # the model's name table maps key -> (local expert id, shard)
        stager.add(expert, shard, lambda key=key: checkpoint.get_tensor(key))   # or a tensor already read
    ...
    stager.finish()                              # after the last key: waits, raises naming missing experts/shards

Expert ids are *local* indices ``0 .. num_experts-1``: under expert parallelism the caller subtracts its offset and
skips experts other ranks hold. Several stagers may share one ``executor`` (pass it in; it is then not shut down).

``num_threads`` (default: env ``MODELGEN_LOADER_NUM_THREADS``, else 16) > 1 selects the staged path; ``1`` selects the
per-expert path, which calls ``per_expert_loader(expert_id, shard_id, tensor)`` immediately for each tensor (no
staging, no threads, ``on_complete`` never called) -- the simple path to fall back on when debugging a loader.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, Union

import torch

from modelgen import settings

from .checkpoint import CheckpointError

__all__ = ["ExpertStager", "ExpertStagingError", "default_num_threads", "NUM_THREADS_ENV"]

NUM_THREADS_ENV = "MODELGEN_LOADER_NUM_THREADS"

TensorSource = Union[torch.Tensor, Callable[[], torch.Tensor]]


class ExpertStagingError(CheckpointError):
    """A fused expert parameter could not be assembled (missing, duplicate or unreadable expert tensors)."""


def default_num_threads() -> int:
    return settings.get(NUM_THREADS_ENV)


def _format_ids(ids: Sequence[int]) -> str:
    """[0, 1, 2, 3, 7] -> '[0-3, 7]' (runs of three or more collapsed), '[3, 5]' stays as is."""
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{ids[i]}-{ids[j]}")
        else:
            parts.extend(str(x) for x in ids[i : j + 1])
        i = j + 1
    return "[" + ", ".join(parts) + "]"


class ExpertStager:
    """Collect ``(expert, shard) -> tensor`` for one fused parameter; stack and deliver once all are present."""

    def __init__(
        self,
        num_experts: int,
        shard_ids: tuple[Hashable, ...],
        on_complete: Callable[[dict[Hashable, torch.Tensor]], Any],
        num_threads: int | None = None,
        *,
        per_expert_loader: Callable[[int, Hashable, torch.Tensor], Any] | None = None,
        name: str = "experts",
        executor: Executor | None = None,
    ) -> None:
        if num_experts < 1:
            raise ValueError(f"{name}: num_experts must be >= 1, got {num_experts}")
        shard_ids = tuple(shard_ids)
        if not shard_ids or len(set(shard_ids)) != len(shard_ids):
            raise ValueError(f"{name}: shard_ids must be non-empty and distinct, got {shard_ids!r}")
        self.num_threads = default_num_threads() if num_threads is None else int(num_threads)
        if self.num_threads < 1:
            raise ValueError(f"{name}: num_threads must be >= 1, got {num_threads}")
        self.staged = self.num_threads > 1
        if not self.staged and per_expert_loader is None:
            raise ValueError(f"{name}: num_threads=1 selects the per-expert path, which needs per_expert_loader")
        self.num_experts = num_experts
        self.shard_ids = shard_ids
        self.name = name
        self.on_complete = on_complete
        self.per_expert_loader = per_expert_loader
        self.completed = False  # on_complete has run (staged path)

        self._lock = threading.Lock()
        self._seen: set[tuple[int, Hashable]] = set()  # every add(), either path
        self._slots: dict[tuple[int, Hashable], torch.Tensor] = {}  # staged tensors that are ready
        self._futures: list[tuple[tuple[int, Hashable], Future]] = []
        self._executor = executor
        self._own_executor = False
        self._finished = False

    # ------------------------------------------------------------------------------------------------------ public
    def add(self, expert_id: int, shard_id: Hashable, tensor_or_callable: TensorSource) -> None:
        """Stage one expert's shard: a tensor, or a zero-argument callable returning it (read lazily)."""
        if self._finished:
            raise ExpertStagingError(f"{self.name}: add() after finish()")
        expert_id = int(expert_id)
        if not 0 <= expert_id < self.num_experts:
            raise ExpertStagingError(
                f"{self.name}: expert {expert_id} out of range [0, {self.num_experts}) (pass local expert ids)"
            )
        if shard_id not in self.shard_ids:
            raise ExpertStagingError(f"{self.name}: unknown shard {shard_id!r}; expected one of {self.shard_ids!r}")
        key = (expert_id, shard_id)
        with self._lock:
            if key in self._seen:
                raise ExpertStagingError(f"{self.name}: expert {expert_id} shard {shard_id!r} added twice")
            self._seen.add(key)

        if not self.staged:
            tensor = self._read(key, tensor_or_callable)
            self.per_expert_loader(expert_id, shard_id, tensor)
            return
        if callable(tensor_or_callable) and not isinstance(tensor_or_callable, torch.Tensor):
            future = self._pool().submit(self._read_and_store, key, tensor_or_callable)
            self._futures.append((key, future))
        else:
            self._store(key, tensor_or_callable)

    def finish(self) -> None:
        """Wait for pending reads; raise ``ExpertStagingError`` if a read failed or the group never completed."""
        if self._finished:
            return
        self._finished = True
        errors: list[str] = []
        try:
            for (expert_id, shard_id), future in self._futures:
                exc = future.exception()  # blocks until that read (and any completion it triggered) is done
                if exc is not None:
                    errors.append(f"expert {expert_id} shard {shard_id!r}: {type(exc).__name__}: {exc}")
        finally:
            if self._own_executor:
                self._executor.shutdown(wait=True)
            self._futures.clear()
        if errors:
            raise ExpertStagingError(f"{self.name}: " + "; ".join(errors))
        missing = self.missing()
        if missing:
            by_shard = "; ".join(
                f"experts {_format_ids(ids)} missing shard {shard!r}" for shard, ids in missing.items()
            )
            raise ExpertStagingError(f"{self.name}: {by_shard}")
        if self.staged and not self.completed:  # cannot happen when nothing is missing; guard the invariant
            raise ExpertStagingError(f"{self.name}: all experts present but the stacked copy never ran")

    def missing(self) -> dict[Hashable, list[int]]:
        """``{shard: [expert ids never added]}`` for shards with gaps."""
        out: dict[Hashable, list[int]] = {}
        with self._lock:
            for shard in self.shard_ids:
                ids = [e for e in range(self.num_experts) if (e, shard) not in self._seen]
                if ids:
                    out[shard] = ids
        return out

    def __enter__(self) -> "ExpertStager":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finish()
        elif self._own_executor and self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    # ----------------------------------------------------------------------------------------------------- private
    def _pool(self) -> Executor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.num_threads, thread_name_prefix="modelgen-experts")
            self._own_executor = True
        return self._executor

    def _read(self, key: tuple[int, Hashable], source: TensorSource) -> torch.Tensor:
        tensor = source() if callable(source) and not isinstance(source, torch.Tensor) else source
        if not isinstance(tensor, torch.Tensor):
            raise ExpertStagingError(
                f"{self.name}: expert {key[0]} shard {key[1]!r}: expected a tensor, got {type(tensor).__name__}"
            )
        return tensor

    def _read_and_store(self, key: tuple[int, Hashable], source: Callable[[], torch.Tensor]) -> None:
        self._store(key, self._read(key, source))

    def _store(self, key: tuple[int, Hashable], tensor: torch.Tensor) -> None:
        total = self.num_experts * len(self.shard_ids)
        with self._lock:
            self._slots[key] = tensor
            complete = len(self._slots) == total
        if complete:  # exactly one caller sees the count reach total
            self._complete()

    def _complete(self) -> None:
        stacked: dict[Hashable, torch.Tensor] = {}
        for shard in self.shard_ids:
            parts = [self._slots[(e, shard)] for e in range(self.num_experts)]
            shapes = {tuple(p.shape) for p in parts}
            if len(shapes) != 1:
                raise ExpertStagingError(f"{self.name}: shard {shard!r} has experts of different shapes {shapes}")
            stacked[shard] = torch.stack(parts)
        self._slots.clear()  # drop the per-expert references before the copy
        self.on_complete(stacked)
        self.completed = True
