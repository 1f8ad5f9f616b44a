"""Symmetric-memory buffers set up by every rank of a group together, or by none: what both one-shot all-reduces
(PyTorch's, ``allreduce.py``; the Triton exchange of ``allreduce_norm.py``) allocate their peer-readable buffers with.

Its own module, below both, so neither all-reduce module imports the other for it (``allreduce.py`` calls
``allreduce_norm.py``'s kernel). torch only: no Triton here.
"""
from __future__ import annotations

import sys

import torch
import torch.distributed as dist


def _agree(ok: bool, group: dist.ProcessGroup, device: torch.device) -> bool:
    """Whether every rank of ``group`` says ``ok`` (a MIN all-reduce on the group's own backend)."""
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())


# Whether this process ran a symmetric-memory rendezvous in a process group it has since left. torch keeps per-process
# rendezvous state that a later group (whose default group has the same name, "0") cannot share with a fresh peer: on
# two H200s the second TP=2 engine of one pytest process waited in ``rendezvous`` on both ranks
# (bench/results/h200x2-tp-second-world-hang.log). So one symmetric-memory world per process; later ones take NCCL.
SPENT = {"rendezvous_now": False, "earlier_world": False}


def symmetric_buffers(numel: int, dtype: torch.dtype, device: torch.device, group: dist.ProcessGroup, count: int = 1):
    """``count`` symmetric-memory buffers of ``numel`` elements with their rendezvous handles, set up by every rank
    of ``group`` together -- or None on every rank if any rank cannot (a RuntimeError names the first local cause).

    Why the agreement steps: ``rendezvous`` is a collective. If one rank's allocation failed (memory, driver, no P2P)
    and it fell back to NCCL while its peers entered the rendezvous, the peers would wait for ever. So: agree that no
    rank is in a later world of its process (``SPENT``: the cause of the TP=2 GPU-test hang,
    bench/results/h200x2-tp-second-world-hang.log); allocate, agree; rendezvous, agree; any failure anywhere and
    every rank drops the buffers and takes the fallback together."""
    import torch.distributed._symmetric_memory as symm_mem

    bufs, handles, error = [], [], None
    if not _agree(not SPENT["earlier_world"], group, device):
        _warn_fallback(RuntimeError("this process set up symmetric memory in an earlier process group")
                       if SPENT["earlier_world"] else None, "set-up")
        return None
    try:
        bufs = [symm_mem.empty(numel, dtype=dtype, device=device) for _ in range(count)]
    except Exception as e:  # noqa: BLE001 -- any local failure becomes the group's fallback
        error = e
    if not _agree(error is None, group, device):
        _warn_fallback(error, "allocation")
        return None
    SPENT["rendezvous_now"] = True
    try:
        handles = [symm_mem.rendezvous(buf, group.group_name) for buf in bufs]
    except Exception as e:  # noqa: BLE001
        error = e
    if not _agree(error is None, group, device):
        _warn_fallback(error, "rendezvous")
        return None
    return list(zip(bufs, handles))


def _warn_fallback(error: BaseException | None, step: str) -> None:
    where = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}" if error else "on a peer rank"
    print(f"modelgen: symmetric-memory all-reduce unavailable ({step} failed {where}); using NCCL", file=sys.stderr)


def retire() -> None:
    """The process group this process set up buffers in is gone (``allreduce.reset``): later groups take NCCL."""
    if SPENT["rendezvous_now"]:
        SPENT["earlier_world"], SPENT["rendezvous_now"] = True, False
