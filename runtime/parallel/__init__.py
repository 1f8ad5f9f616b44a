"""Parallel modes the engine starts and drives itself.

``launch.py``: ``LLM(..., tensor_parallel_size=N, expert_parallel_size=M)`` spawns ranks 1..N-1 (torch.multiprocessing,
gloo on CPU, NCCL on N GPUs); rank 0 (the calling process) schedules and broadcasts every step's inputs, the other
ranks run the same step on their shards. ``pipeline.py``: ``pipeline_parallel_size=P`` (P x TP ranks, each stage
building, loading and caching only its layers, hidden + residual sent stage to stage). ``attention_dp.py``:
``data_parallel_size=D`` (D groups each with its own requests and KV cache, MoE/MLP layers over all ranks).
``sequence.py`` / ``data.py``: sequence parallelism and MLP data parallelism inside a TP world.
"""
from __future__ import annotations

from .launch import Ranks, abort_ranks_on_error, start_ranks

__all__ = ["Ranks", "abort_ranks_on_error", "start_ranks"]
