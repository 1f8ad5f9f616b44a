"""The machine a command runs on: which device ``--device auto`` means, and how many intra-op threads torch uses.

``modelgen run`` and ``modelgen serve`` call these before loading a model (``LLM`` itself leaves both to its
caller: a library should not change a process-wide torch setting behind its user's back).

Threads: torch's default intra-op pool is sized from the machine's cores, not from the cores this process may run
on (``taskset``, a cgroup cpuset, a container's CPU quota), nor from what else is running; an oversubscribed pool
(OpenMP threads spin at each op's barrier waiting for a thread the scheduler has parked) makes CPU decode several
times slower. Measured on this 2-core box with two other jobs running (load average 2.3-3.6), SmolLM2-135M greedy,
48 tokens, interleaved runs: 2 threads 6.3 and 1.6 tokens/s, 1 thread 15.3 and 9.7 tokens/s. :func:`cpu_threads`
therefore takes the cores the process may use, less the share of them the 1-minute load average says is busy
(rounded, at least 1), and :func:`configure_threads` applies it, unless the user chose: ``MODELGEN_NUM_THREADS``
(modelgen's own knob) wins, then ``OMP_NUM_THREADS`` (which torch already honours; left alone). When the command
starts CPU ranks of its own (``--tensor-parallel-size`` and friends), this process is one of them and takes its
share. The count is decided once, when the command starts.
"""
from __future__ import annotations

import math
import os

from modelgen import settings


def resolve_device(device: str | None) -> str:
    """``auto`` (or None): ``cuda`` when torch sees a CUDA GPU, else ``cpu``; anything else unchanged (the engine
    validates it)."""
    if device is None or str(device).strip().lower() == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _cgroup_cpu_limit() -> int | None:
    """A container's CPU quota rounded up (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``); None when unlimited."""
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        if quota != "max":
            return max(1, math.ceil(int(quota) / int(period)))
        return None
    except (OSError, ValueError):
        pass
    try:
        quota = int(open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read())
        period = int(open("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read())
        return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity (``os.sched_getaffinity``; ``os.cpu_count`` where there is
    none), capped by a cgroup CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    limit = _cgroup_cpu_limit()
    return max(1, min(cores, limit) if limit else cores)


def busy_cores(cores: int) -> float:
    """How many of ``cores`` other work keeps busy: the 1-minute load average scaled from the machine's CPUs to these
    (load assumed spread evenly); 0 where the platform has no load average."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0
    return max(0.0, load) * cores / max(cores, os.cpu_count() or cores)


def cpu_threads(ranks: int = 1) -> tuple[int | None, str]:
    """(intra-op threads to set, where the number comes from). None: leave torch's setting (``OMP_NUM_THREADS``
    given). ``ranks``: processes of this command sharing the cores (this one included). ValueError for a bad
    ``MODELGEN_NUM_THREADS``."""
    own = settings.get("MODELGEN_NUM_THREADS")
    if own is not None:
        return own, "MODELGEN_NUM_THREADS"
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        return None, "OMP_NUM_THREADS"
    cores = usable_cores()
    busy = busy_cores(cores)
    free = max(1, min(cores, math.floor(cores - busy + 0.5)))
    source = f"{cores} usable core(s)" + (f", {busy:.1f} busy" if busy >= 0.5 else "")
    return max(1, free // max(1, ranks)), source + (f", / {ranks} ranks" if ranks > 1 else "")


def configure_threads(ranks: int = 1) -> tuple[int, str]:
    """Set torch's intra-op threads as :func:`cpu_threads` says; returns (threads now in use, source)."""
    import torch

    n, source = cpu_threads(ranks)
    if n is not None and n != torch.get_num_threads():
        torch.set_num_threads(n)
    return torch.get_num_threads(), source
