"""The fused all-reduce + residual-add + RMSNorm of a tensor-parallel decoder layer (what :class:`RMSNorm` runs when
it reduces its input, ``runtime/layers/norm.py``).

It sits here, above ``runtime/distributed.py``, and not beside the single-device norms of ``runtime/ops/norm.py``:
``distributed`` itself calls down into ``runtime/ops/gpu/`` (its one-shot all-reduce), so an op in ``runtime/ops/``
that reduces across ranks would close a loop.
"""
from __future__ import annotations

import torch

from .. import distributed as dist
from ..ops import gpu
from ..ops import norm as torch_norm


def all_reduce_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None, eps: float, zero_centred: bool = False,
    weight_float32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` is this rank's partial sum of a row-parallel output: ``residual = all_reduce(x) + residual; return
    rms_norm(residual), residual`` -- the fused all-reduce + residual-add + RMSNorm of ATOM's decoder layers.

    Backends, first that applies: aiter's fused kernel (``aiter.dist.communication_op.
    tensor_model_parallel_fused_allreduce_rmsnorm``, one launch; only when aiter imports, its own TP group is set up
    with this world size, the tensors are on a GPU and the norm is the plain affine Llama one); then the Triton
    one-launch kernel over CUDA symmetric memory (``runtime/ops/gpu/allreduce_norm.py``: NCCL default world of 2..8
    GPUs, small messages, every affine convention; ``MODELGEN_FUSED_ALLREDUCE_NORM=0`` turns it off for A/B);
    otherwise one all-reduce followed by the fused add + RMSNorm (the Triton kernel on the GPU path, the torch
    reference of ``runtime/ops/norm.py`` on the CPU). At world size 1 it is exactly ``add_rms_norm``.
    """
    if dist.tp_size() > 1:
        fused = _aiter_all_reduce_rms_norm(x, residual, weight, eps, zero_centred, weight_float32)
        if fused is None:
            fused = _triton_all_reduce_rms_norm(x, residual, weight, eps, zero_centred, weight_float32)
        if fused is not None:
            return fused
        x = dist.all_reduce(x)
    if gpu.enabled(x) and weight is not None and not weight_float32:
        from ..ops.gpu import norm as gpu_norm

        return gpu_norm.add_rms_norm(x, residual, weight, eps, zero_centred)
    return torch_norm.add_rms_norm(x, residual, weight, eps, zero_centred, weight_float32)


def _triton_all_reduce_rms_norm(x, residual, weight, eps, zero_centred, weight_float32):
    """The Triton one-launch kernel (``runtime/ops/gpu/allreduce_norm.py``), or None where it does not apply (it
    checks the group, sizes and switches itself)."""
    if not x.is_cuda or weight is None:
        return None
    if not gpu.enabled(x):
        return None
    from ..ops.gpu import allreduce_norm

    return allreduce_norm.all_reduce_add_rms_norm(x, residual, weight, eps, zero_centred, weight_float32)


def _aiter_all_reduce_rms_norm(x, residual, weight, eps, zero_centred, weight_float32):
    """aiter's one-launch all-reduce + add + RMSNorm, or None where it does not apply (see the caller)."""
    if not x.is_cuda or residual is None or weight is None or zero_centred or weight_float32:
        return None
    if dist.tp_group() is not None:  # PP x TP / DP x TP: our TP group is a sub-group, aiter's is the world
        return None
    if gpu._mode() in ("torch", "triton"):  # MODELGEN_BACKEND names another backend
        return None
    fused = _aiter_fused_op()
    if fused is None:
        return None
    out = fused(x, residual, weight, eps)
    return None if out is None else (out[0], out[1])


def _aiter_fused_op():
    """aiter's fused op when aiter imports and its TP group matches ours; None otherwise (checked once)."""
    if "op" not in _AITER:
        _AITER["op"] = None
        try:
            from aiter.dist.communication_op import tensor_model_parallel_fused_allreduce_rmsnorm
            from aiter.dist.parallel_state import get_tensor_model_parallel_world_size

                    # aiter reduces over its own process group: usable only when it was initialised for our world.
            if get_tensor_model_parallel_world_size() == dist.tp_size():
                _AITER["op"] = tensor_model_parallel_fused_allreduce_rmsnorm
        except Exception:  # not installed, or installed without its TP group initialised
            pass
    return _AITER["op"]


_AITER: dict = {}
