"""Which ranks this rank's tensor-parallel collectives run on: the whole world, or the TP group a parallel mode set.

The state sits below :mod:`runtime.distributed` (which re-exports it: generated code and the parallel modes ask
``distributed.tp_size()``) so that the one-shot all-reduce kernels ``runtime/ops/gpu/allreduce*.py``, which
``distributed.all_reduce`` calls, can ask for the group without importing the module that calls them.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch.distributed as dist


@dataclass(frozen=True)
class _Groups:
    """This rank's TP group (``None``: a group of one) and its place in it."""

    size: int
    rank: int
    group: object | None


_GROUPS: _Groups | None = None  # None: the TP group is the default (whole) world


def set_groups(size: int | None = None, rank: int = 0, group=None) -> None:
    """Make the TP group ``group`` (``size`` ranks, this one ``rank`` of them); no argument: back to the whole world.
    Every process of the world sets its own group the same way (``new_group`` is collective)."""
    global _GROUPS
    _GROUPS = None if size is None else _Groups(size, rank, group)


def _world() -> bool:
    return dist.is_available() and dist.is_initialized()


def tp_size() -> int:
    if _GROUPS is not None:
        return _GROUPS.size
    return dist.get_world_size() if _world() else 1


def tp_rank() -> int:
    if _GROUPS is not None:
        return _GROUPS.rank
    return dist.get_rank() if _world() else 0


def tp_group():
    """The ``group=`` argument of this rank's TP collectives (None: the default group)."""
    return _GROUPS.group if _GROUPS is not None else None


@contextlib.contextmanager
def world_scope():
    """Inside: the TP group is the whole world (``tp_size()`` = world size). Attention data parallelism builds and
    runs its MoE / MLP layers in it, while attention sees its own (smaller) group outside."""
    global _GROUPS
    saved = _GROUPS
    _GROUPS = None
    try:
        yield
    finally:
        _GROUPS = saved
