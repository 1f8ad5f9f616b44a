"""Rank 0 -> followers step messages through one shared-memory file instead of gloo broadcasts.

Why: an engine-started tensor-parallel group sends each step's inputs (a header, the work items, the sampling
parameters) from rank 0 to the followers before every model call, and a follower's GPU cannot start the step before
its host has them. Over gloo (TCP on loopback) each of those three broadcasts costs tens to hundreds of microseconds
and the follower starts its host preparation only after the last one: at batch 1 that lag is paid on every decode
step, between GPUs that are otherwise 2-3 ms per step (the TP=2 decode speed-up measured 1.08x on two H200s). vLLM
moved its per-step broadcast to a shared-memory queue for the same reason. Here: one memory-mapped file in the
group's temporary directory, written by rank 0 and read by the followers, who poll it.

Layout, int64 words: ``[0]`` the sequence number of the message in the payload (written last), ``[1]`` its word
count, ``[2 + r - 1]`` follower r's acknowledgement (the last sequence number it copied out), then the payload area.
The writer waits for every acknowledgement of the previous message before overwriting the payload; a message larger
than the payload area goes in several pieces, each its own sequence number (both sides know the total length).

Ordering: the payload is stored before the sequence number and read after it. x86's total store order keeps both
orders for plain stores and loads, so this is only used on x86-64 hosts; elsewhere (and when the environment says
``MODELGEN_SHM_CONTROL=0``) the launcher keeps gloo. Followers poll in a tight loop for a short while and then
yield the CPU between polls, so an idle follower does not hold a core.
"""
from __future__ import annotations

import mmap
import platform
import time
from pathlib import Path

import torch

from modelgen import settings

_HEAD = 2  # seq, length
_SPIN = 20000  # polls before yielding the CPU between polls


def supported() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def wanted(device_type: str) -> bool:
    """Shared-memory control for GPU groups on x86-64 (default), never for CPU groups unless forced: on CPU-only
    hosts the followers' polling would compete with the ranks' own compute for the few cores."""
    forced = settings.get("MODELGEN_SHM_CONTROL")
    if forced is not None:
        return forced and supported()
    return device_type == "cuda" and supported()


class ShmChannel:
    """One writer (rank 0), ``world - 1`` readers; :meth:`broadcast` has ``dist.broadcast(t, src=0)``'s meaning."""

    def __init__(self, path: str | Path, rank: int, world: int, capacity_words: int = 1 << 20,
                 timeout_s: float = 600.0):
        self.rank, self.world, self.timeout_s = rank, world, timeout_s
        words = _HEAD + (world - 1) + capacity_words
        path = Path(path)
        if rank == 0:
            with open(path, "wb") as f:  # zero-filled: sequence 0 = nothing sent yet
                f.truncate(words * 8)
        else:
            deadline = time.monotonic() + timeout_s
            while not path.exists() or path.stat().st_size < words * 8:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"shared-memory control file {path} never appeared")
                time.sleep(0.01)
        self._file = open(path, "r+b")
        self._map = mmap.mmap(self._file.fileno(), words * 8)
        self.words = torch.frombuffer(self._map, dtype=torch.int64, count=words)
        self.acks = self.words[_HEAD:_HEAD + world - 1]
        self.payload = self.words[_HEAD + world - 1:]
        self.capacity = capacity_words
        self.seq = 0

    # ------------------------------------------------------------------------------------------------- both sides
    def broadcast(self, t: torch.Tensor) -> torch.Tensor:
        """Rank 0: send ``t``; a follower: fill ``t`` (same shape and dtype on every rank, 8-byte elements)."""
        if t.element_size() != 8:
            raise TypeError(f"ShmChannel sends 8-byte elements, got {t.dtype}")
        flat = t.reshape(-1).view(torch.int64)
        for start in range(0, max(flat.numel(), 1), self.capacity):
            piece = flat[start:start + self.capacity]
            if self.rank == 0:
                self._write(piece)
            else:
                self._read(piece)
        return t

    def close(self) -> None:
        try:
            del self.words, self.acks, self.payload
            self._map.close()
            self._file.close()
        except (AttributeError, BufferError, ValueError):
            pass

    # -------------------------------------------------------------------------------------------------- internals
    def _wait(self, ready, what: str) -> None:
        polls, deadline = 0, None
        while not ready():
            polls += 1
            if polls > _SPIN:
                if deadline is None:
                    deadline = time.monotonic() + self.timeout_s
                elif time.monotonic() > deadline:
                    raise TimeoutError(f"rank {self.rank}: no {what} within {self.timeout_s:.0f} s "
                                       "(MODELGEN_DIST_TIMEOUT)")
                time.sleep(0)

    def _write(self, piece: torch.Tensor) -> None:
        seq = self.seq
        self._wait(lambda: bool((self.acks == seq).all()), "acknowledgement from the follower ranks")
        self.payload[:piece.numel()].copy_(piece)
        self.words[1] = piece.numel()
        self.seq = seq + 1
        self.words[0] = self.seq  # last: publishes the payload

    def _read(self, piece: torch.Tensor) -> None:
        seq = self.seq + 1
        self._wait(lambda: int(self.words[0]) == seq, "message from rank 0")
        n = int(self.words[1])
        if n != piece.numel():
            raise RuntimeError(f"rank {self.rank}: control message of {n} words, expected {piece.numel()}")
        piece.copy_(self.payload[:n])
        self.seq = seq
        self.acks[self.rank - 1] = seq
