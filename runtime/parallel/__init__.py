"""Parallel modes the engine starts and drives itself.

``launch.py``: ``LLM(..., tensor_parallel_size=N, expert_parallel_size=M)`` spawns ranks 1..N-1 (torch.multiprocessing,
gloo on CPU, NCCL on N GPUs); rank 0 (the calling process) schedules and broadcasts every step's inputs, the other
ranks run the same step on their shards. ``pipeline.py``: the layer split of pipeline parallelism.
"""
from __future__ import annotations

from .launch import Ranks, abort_ranks_on_error, start_ranks

__all__ = ["Ranks", "abort_ranks_on_error", "start_ranks"]
