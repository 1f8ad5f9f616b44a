"""The unit of work the scheduler (runtime/engine/scheduler.py) hands a target's runner (runtime/targets/*/runner.py).

A step is a list of :class:`Work` items: a sequence's new tokens and the position of the first one. The rocm runner
flattens them into one varlen batch (prefill and decode may mix); the neuron runner pads them to compiled buckets.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Work:
    seq_id: int
    token_ids: list[int]  # new tokens fed this step
    start_pos: int  # position of token_ids[0]


def pad_tables(tables: list[list[int]], width: int) -> list[list[int]]:
    """Block tables right-padded with block 0 to ``width`` columns (padding entries are never read past the
    sequence's context length)."""
    return [t + [0] * (width - len(t)) for t in tables]
