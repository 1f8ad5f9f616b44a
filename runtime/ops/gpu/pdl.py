"""Programmatic dependent launch (PDL) for the decode-chain kernels, and an L2 prefetch of weights before the wait.

At batch 1 a decode layer is ~10 small kernels whose weights take ~27 us to stream on an H200 against ~70 us
measured: each kernel pays a launch, a ramp-up (the first loads' latency) and a tail. With PDL (sm_90+, CUDA 12.3+
graphs keep the programmatic edges) a kernel launched with ``launch_pdl=True`` may start while its predecessor still
runs; it executes ``griddepcontrol.wait`` before touching anything the predecessor writes, and releases its own
dependents (``griddepcontrol.launch_dependents``) right after that wait. So:

* at most two kernels of a chain are in flight: kernel n+1 starts only once every program of kernel n has passed
  its wait, i.e. once kernel n-1 has completed and its writes are visible. Before its wait a kernel may therefore
  read what kernel n-1 or earlier wrote (the MoE down kernel reads the router's expert ids there, two launches
  back) -- never what its direct predecessor writes -- and it writes nothing;
* every program waits unconditionally (before any early exit), so a kernel never completes ahead of its
  predecessor;
* what a kernel does before its wait is a bulk L2 prefetch of its own weight tile (``cp.async.bulk.prefetch.L2``,
  sm_90): weights are never written by the chain, so the next kernel's weight stream overlaps the previous
  kernel's tail and its own launch instead of starting after them. (A prefetch only moves lines into L2, the
  device's point of coherence: it can never serve stale data, at worst it wastes bandwidth.)

``MODELGEN_PDL=2`` releases dependents *before* the wait in every kernel whose successor reads nothing early (all
but the MoE gate-up kernels, whose successor -- the down kernel -- reads the router's ids before its own wait), so
a successor's launch and weight prefetch can overlap its predecessor's predecessor too (several kernels resident
at once). Still correct: every kernel waits before reading or writing anything the chain produces, and a kernel
completes only after its predecessor has. Whether the deeper overlap pays (more prefetches in flight than L2 may
hold) is measured by ``bench/moe_layer.py``.

``MODELGEN_PREFETCH_AHEAD=1`` (sm_90, with or without PDL; default 0) lets kernels prefetch, once their own weights
are in flight, what a *later* kernel reads: the MoE gate-up programs their experts' down weights, and a GEMV a
tensor passed as ``linear(..., prefetch=t)`` (the QKV projection the output projection's weight, streamed while
attention -- which reads little -- runs).

Kernels launched normally (cuBLAS, torch ops, kernels without these calls) keep the ordinary full serialisation
around them, so mixing is safe. Where PDL is off (``MODELGEN_PDL=0``; Triton's
interpreter; ROCm; GPUs before sm_90; a Triton without ``gdc_wait``) the kernels compile without the calls
(``PDL`` constexpr 0) and launch as before. ``MODELGEN_PDL_PREFETCH=1`` adds the pre-wait prefetch (off by default:
slower in the H200 measurement, see :func:`refresh`).

Default ``MODELGEN_PDL=1``: measured end to end on the H200 (bench/moe.py --pdl-levels 1 2, Qwen3-30B-A3B shape, 24
layers, one run, bench/results/h200-qwen3-30b-a3b-moe-pdl.json) decode went 592 -> 634 tok/s at batch 1 (x1.07),
1,846 -> 1,891 at 8, 4,299 -> 4,371 at 32, the 16 greedy tokens of every batch identical to PDL off; level 2 was
no faster (631 / 1,891 / 4,374). The engine's GPU tests (test_gpu.py, test_gpu_moe.py engine/graph cases,
test_gpu_speculative.py, test_gpu_moe_bias.py) pass with it on.
"""
from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from modelgen import settings

_STATE: dict[str, int] = {}


def refresh() -> None:
    """Re-read ``MODELGEN_PDL`` (0 off, 1 release after the wait -- the default, 2 release early where allowed) and
    ``MODELGEN_PDL_PREFETCH`` (0/1, default 0). Graphs captured before keep what they captured."""
    _STATE["pdl"] = int(settings.get("MODELGEN_PDL"))
    # Off by default: measured on the H200 (bench/moe_layer.py, Qwen3-30B-A3B layer, bs 1) PDL alone took 55.8 us
    # per layer against 61.7 without, PDL + this prefetch 59.1 (o_proj 5.7 -> 8.4 us, down 13.9 -> 15.5): issued
    # just before the same kernel's own loads it duplicates their requests instead of hiding latency.
    _STATE["prefetch"] = int(settings.get("MODELGEN_PDL_PREFETCH"))
    _STATE["ahead"] = int(settings.get("MODELGEN_PREFETCH_AHEAD"))


def set_mode(pdl: int | bool | None = None, prefetch: bool | None = None, ahead: bool | None = None) -> None:
    """Switch PDL (0/1/2, or a bool for 0/1), its weight prefetch and the prefetch ahead in this process
    (benchmarks' A/B; tests)."""
    if pdl is not None:
        _STATE["pdl"] = int(pdl)
    if prefetch is not None:
        _STATE["prefetch"] = int(bool(prefetch))
    if ahead is not None:
        _STATE["ahead"] = int(bool(ahead))


@functools.lru_cache(maxsize=None)
def _device_ok(index: int) -> bool:
    if torch.version.hip is not None or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    try:
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.get_device_capability(index)[0] >= 9


def _sm90(device: torch.device) -> bool:
    return device.type == "cuda" and _device_ok(device.index if device.index is not None
                                                else torch.cuda.current_device())


def active(device: torch.device) -> bool:
    """PDL on for kernels launched on ``device``."""
    return _STATE["pdl"] > 0 and _sm90(device)


def launch(device: torch.device, early: bool = True) -> dict:
    """Keyword arguments of a chain kernel's launch: the ``PDL`` constexpr (0 off, 1 release after the wait, 2
    release before it) and Triton's ``launch_pdl`` option. ``early=False``: the kernel's successor reads, before its
    own wait, what this kernel's predecessor wrote, so this kernel must release after its wait."""
    if active(device):
        return {"PDL": 2 if _STATE["pdl"] == 2 and early else 1, "launch_pdl": True}
    return {"PDL": 0}


def prefetch_ok(device: torch.device, *tensors: torch.Tensor) -> bool:
    """Whether a chain kernel should prefetch its weight tile: PDL on, prefetch on, and every weight's base and row
    starts 16-byte aligned (the bulk prefetch's rule; sizes are rounded inside :func:`prefetch_rows`)."""
    return bool(_STATE["prefetch"]) and active(device) and _aligned(tensors)


def _aligned(tensors) -> bool:
    for t in tensors:
        es = t.element_size()
        if t.data_ptr() % 16 or any((s * es) % 16 for s in t.stride()[:-1]) or (t.shape[-1] * es) % 16:
            return False
    return True


def bulk_prefetch_ok(device: torch.device, *tensors: torch.Tensor) -> bool:
    """Whether kernels on ``device`` may issue bulk L2 prefetches of rows of ``tensors`` (sm_90, 16-byte aligned
    base and row starts); independent of the PDL / prefetch switches (a kernel config asks for it)."""
    return _sm90(device) and _aligned(tensors)


def ahead_ok(device: torch.device, t: torch.Tensor | None) -> bool:
    """Whether kernels on ``device`` should prefetch ``t`` for a later kernel (:func:`prefetch_share`): the switch on,
    sm_90, ``t`` contiguous, 16-byte aligned and sized, under 2 GiB."""
    return (t is not None and bool(_STATE["ahead"]) and _sm90(device) and t.is_contiguous()
            and t.numel() * t.element_size() < 2 ** 31 and _aligned((t.view(-1),)))


@triton.jit
def wait(PDL: tl.constexpr):
    """Wait for the predecessor's writes and let the next kernel launch: after the wait (``PDL`` 1) or before it
    (2; see the module docstring). Nothing with ``PDL`` 0 / False."""
    if PDL == 1:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    if PDL == 2:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()


@triton.jit
def bulk_prefetch(addr, nbytes, go):
    """``cp.async.bulk.prefetch.L2`` of ``nbytes`` (a multiple of 16) at each ``addr`` (16-byte aligned) where
    ``go`` != 0: fire and forget, the program does not wait for the data (sm_90)."""
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $3, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r,r", [addr, nbytes.to(tl.int32), go], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def prefetch_rows(ptr0, stride_row, nrows, row_elems, ROWS: tl.constexpr, CHUNKS: tl.constexpr):
    """L2 prefetch of ``nrows`` (at most ``ROWS``) rows of ``row_elems`` elements starting at ``ptr0``, ``stride_row``
    elements apart, each row split into ``CHUNKS`` pieces so ``ROWS * CHUNKS`` bulk prefetches (one per thread at 4
    warps when that is 128) go out at once. Pieces are multiples of 16 bytes (the instruction's rule; the caller
    checked the 16-byte alignment of the base and the row starts with :func:`prefetch_ok`)."""
    ESIZE: tl.constexpr = ptr0.dtype.element_ty.primitive_bitwidth // 8
    idx = tl.arange(0, ROWS * CHUNKS)
    r = idx // CHUNKS
    c = idx % CHUNKS
    row_bytes = row_elems * ESIZE
    piece = (row_bytes // CHUNKS) // 16 * 16
    nbytes = tl.where(c == CHUNKS - 1, row_bytes - (CHUNKS - 1) * piece, piece)
    addr = ptr0.to(tl.pointer_type(tl.int8)) + (r.to(tl.int64) * stride_row * ESIZE + c * piece)
    go = ((r < nrows) & (nbytes > 0)).to(tl.int32)
    bulk_prefetch(addr, nbytes, go)


@triton.jit
def prefetch_share(ptr, nbytes, p, nprog, CHUNKS: tl.constexpr):
    """L2 prefetch of program ``p``'s share (one ``nprog``-th, in 16-byte units) of the ``nbytes`` bytes at ``ptr``
    (16-byte aligned, ``nbytes`` a multiple of 16), in ``CHUNKS`` bulk prefetches: a kernel's programs prefetch a
    tensor that a later kernel reads (the output projection's weight while attention, which streams little, runs)."""
    units = nbytes // 16
    share = (units + nprog - 1) // nprog
    piece = (share + CHUNKS - 1) // CHUNKS
    c = tl.arange(0, CHUNKS)
    start = p * share + c * piece
    end = tl.minimum(tl.minimum(start + piece, (p + 1) * share), units)
    go = (end > start).to(tl.int32)
    addr = ptr.to(tl.pointer_type(tl.int8)) + start.to(tl.int64) * 16
    bulk_prefetch(addr, (end - start) * 16, go)


refresh()
