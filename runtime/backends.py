"""Which kernel library the ops use: selected once at import, overridable by ``MODELGEN_BACKEND``.

  aiter   AMD's kernels on ROCm (``import aiter`` succeeds only with ROCm present)
  nki     AWS Neuron kernels (``import torch_neuronx`` / ``nki``; real packages live on AWS's index)
  triton  Triton kernels (``runtime/ops/gpu/``) for tensors on a CUDA/HIP GPU; CPU tensors keep the torch reference
  torch   the plain-torch reference ops, always available (CPU, CUDA, ROCm)

A target asks for its preferred backend; when that library does not import, the torch reference runs instead,
exactly as vLLM Neuron's CPU mode does; on an NVIDIA GPU (no aiter) the rocm target runs the Triton kernels.
``modelgen run --verbose`` prints the choice and why. The layers re-check per call (``runtime.ops.gpu.enabled``):
Triton only ever runs on GPU tensors.
"""
from __future__ import annotations

import importlib

from modelgen import settings

TARGET_PREFERENCE = {"rocm": "aiter", "neuron": "nki"}
_MODULES = {"aiter": ("aiter",), "nki": ("torch_neuronx", "nki"), "triton": ("triton",)}
_probe_cache: dict[str, str | None] = {}


def _probe(backend: str) -> str | None:
    """None when the backend's library imports, else the reason it does not."""
    if backend == "torch":
        return None
    if backend not in _probe_cache:
        reason = None
        for mod in _MODULES[backend]:
            try:
                importlib.import_module(mod)
            except Exception as e:  # aiter raises RuntimeError/OSError without ROCm; placeholders raise ImportError
                reason = f"import {mod} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                break
        _probe_cache[backend] = reason
    return _probe_cache[backend]


def select(target: str, device=None) -> tuple[str, str]:
    """(backend, explanation) for ``target`` (and, when given, the device the model runs on)."""
    forced = settings.get("MODELGEN_BACKEND")
    if forced:
        reason = _probe(forced)
        if reason:
            raise RuntimeError(f"MODELGEN_BACKEND={forced} but {reason}")
        return forced, f"forced by MODELGEN_BACKEND={forced}"
    preferred = TARGET_PREFERENCE.get(target, "torch")
    reason = _probe(preferred)
    if reason is None:
        return preferred, f"{preferred} imports"
    on_gpu = device is not None and str(device).startswith("cuda")
    if target == "rocm" and on_gpu:
        why = _probe("triton")
        if why is None:
            return "triton", f"Triton kernels on the GPU ({reason})"
        reason = f"{reason}; {why}"
    return "torch", f"torch reference ops ({reason})"


def active(target: str, device=None) -> str:
    return select(target, device)[0]
