"""GPU fast path of the runtime ops: Triton kernels, used when tensors are on a CUDA/HIP device and Triton imports.

The torch references in ``runtime/ops/*.py`` stay the definition of every op (and the CPU path); the kernels here
compute the same functions without host synchronisation or data-dependent shapes, so decode steps can be captured
into CUDA graphs. ``MODELGEN_BACKEND=torch`` forces the references even on a GPU; ``MODELGEN_BACKEND=triton`` makes a
missing Triton an error instead of a silent fallback.

Nothing here imports Triton at module import time: CPU-only installs (CI) never need it.
"""
from __future__ import annotations

import functools
import os

import torch

from modelgen import settings

_FORCED: dict[str, str | None] = {}


@functools.lru_cache(maxsize=None)
def triton_problem() -> str | None:
    """None when Triton imports, else why it does not."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception as e:  # ImportError, or a broken install raising something else
        return f"import triton failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def _mode() -> str:
    return _FORCED["mode"]


def _on_cpu() -> bool:
    return _FORCED["cpu"] == "1"


def refresh() -> None:
    """Re-read ``MODELGEN_BACKEND`` / ``MODELGEN_TRITON_ON_CPU`` (tests flip them).

    Read eagerly, here and at import, never lazily inside :func:`enabled`: a first call traced by ``torch.compile``
    would record the cache as empty in its guards and then fill it, so the next call of the same graph would fail the
    guard and recompile (a neuron runner warmed before any eager call recompiled its first real prefill).
    """
    _FORCED["mode"] = settings.get("MODELGEN_BACKEND") or "auto"
    _FORCED["cpu"] = "1" if interpreting() and settings.get("MODELGEN_TRITON_ON_CPU") else ""


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def enabled(x: torch.Tensor) -> bool:
    """True when ``x``'s op should run the Triton kernel (``x`` on a GPU, Triton importable, not forced off).

    ``TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1`` also routes CPU tensors through the kernels (Triton's
    interpreter), which tests the GPU path's logic on a machine without a GPU.
    """
    if not x.is_cuda and not _on_cpu():
        return False
    mode = _mode()
    if mode == "torch" or mode in ("aiter", "nki"):
        return False
    problem = triton_problem()
    if problem is not None:
        if mode == "triton":
            raise RuntimeError(f"MODELGEN_BACKEND=triton but {problem}")
        return False
    return True


@functools.lru_cache(maxsize=None)
def num_sms(device_index: int | None) -> int:
    if device_index is None or not torch.cuda.is_available():
        return 4
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


refresh()
