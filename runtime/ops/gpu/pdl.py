"""Programmatic dependent launch (PDL) for the decode-chain kernels, and the bulk L2 prefetch primitives.

At batch 1 a decode layer is ~10 small kernels whose weights take ~27 us to stream on an H200 against ~70 us
measured: each kernel pays a launch, a ramp-up (the first loads' latency) and a tail. With PDL (sm_90+, CUDA 12.3+
graphs keep the programmatic edges) a kernel launched with ``launch_pdl=True`` may start while its predecessor still
runs; it executes ``griddepcontrol.wait`` before touching anything the predecessor writes, and releases its own
dependents (``griddepcontrol.launch_dependents``) right after that wait. So:

* at most two kernels of a chain are in flight: kernel n+1 starts only once every program of kernel n has passed
  its wait, i.e. once kernel n-1 has completed and its writes are visible. Before its wait a kernel may therefore
  read what kernel n-1 or earlier wrote (the MoE down kernels read the router's expert ids there, two launches
  back) -- never what its direct predecessor writes -- and it writes nothing;
* every program waits unconditionally (before any early exit), so a kernel never completes ahead of its
  predecessor.

Kernels launched normally (cuBLAS, torch ops, kernels without these calls) keep the ordinary full serialisation
around them, so mixing is safe. Where PDL is off (``MODELGEN_PDL=0``; Triton's interpreter; ROCm; GPUs before
sm_90; a Triton without ``gdc_wait``) the kernels compile without the calls (``PDL`` constexpr 0) and launch as
before.

Default ``MODELGEN_PDL=1``: measured end to end on the H200 (bench/moe.py --pdl-levels 1 2, Qwen3-30B-A3B shape, 24
layers, one run, bench/results/h200-qwen3-30b-a3b-moe-pdl.json) decode went 592 -> 634 tok/s at batch 1 (x1.07),
1,846 -> 1,891 at 8, 4,299 -> 4,371 at 32, the 16 greedy tokens of every batch identical to PDL off. The engine's
GPU tests (test_gpu.py, test_gpu_moe.py engine/graph cases, test_gpu_speculative.py, test_gpu_moe_bias.py) pass
with it on.

Removed after they lost their measurements (bench/NOTES-switches.md): a release *before* the wait (the former
``MODELGEN_PDL=2``: 631 / 1,891 / 4,374 tok/s in the same run, no faster), each kernel's bulk L2 prefetch of its own
weight tile before its wait (the former ``PDL_PREFETCH`` switch: 59.1 us per layer against 55.8 with PDL alone,
bench/moe_layer.py -- issued just before the kernel's own loads it duplicated their requests) and the prefetch of a
*later* kernel's weight (the former ``PREFETCH_AHEAD`` switch: slower when measured). The bulk prefetch itself
stays: the MoE pair gate-up's timed ``up_prefetch`` candidates prefetch tiles ahead inside their K loop
(:func:`prefetch_rows`).
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
    """Re-read ``MODELGEN_PDL`` (0 off, 1 on -- the default). Graphs captured before keep what they captured."""
    _STATE["pdl"] = int(settings.get("MODELGEN_PDL"))


def set_mode(pdl: int | bool | None = None) -> None:
    """Switch PDL on or off in this process (benchmarks' A/B; tests)."""
    if pdl is not None:
        _STATE["pdl"] = int(bool(pdl))


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


def launch(device: torch.device) -> dict:
    """Keyword arguments of a chain kernel's launch: the ``PDL`` constexpr (0 off, 1 on) and Triton's
    ``launch_pdl`` option."""
    if active(device):
        return {"PDL": 1, "launch_pdl": True}
    return {"PDL": 0}


def _aligned(tensors) -> bool:
    for t in tensors:
        es = t.element_size()
        if t.data_ptr() % 16 or any((s * es) % 16 for s in t.stride()[:-1]) or (t.shape[-1] * es) % 16:
            return False
    return True


def bulk_prefetch_ok(device: torch.device, *tensors: torch.Tensor) -> bool:
    """Whether kernels on ``device`` may issue bulk L2 prefetches of rows of ``tensors`` (sm_90, 16-byte aligned
    base and row starts); independent of PDL (a kernel config asks for it)."""
    return _sm90(device) and _aligned(tensors)


@triton.jit
def wait(PDL: tl.constexpr):
    """Wait for the predecessor's writes, then let the next kernel launch (``PDL`` 1). Nothing with ``PDL`` 0 /
    False."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


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
    checked the 16-byte alignment of the base and the row starts with :func:`bulk_prefetch_ok`)."""
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


refresh()
