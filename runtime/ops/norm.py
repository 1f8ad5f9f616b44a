"""Norms as in HF: RMSNorm (Zhang & Sennrich 2019) in its three rounding conventions, and LayerNorm.

Precision: HF ``LlamaRMSNorm`` computes the mean of squares in float32 and casts back to the input dtype *before*
multiplying by the weight (``weight * hidden.to(input_dtype)``); matching that order matters for bf16 parity.

Zero-centred RMSNorm (HF ``Qwen3NextRMSNorm``, ``Gemma*RMSNorm``): the checkpoint stores the weight as an offset from
one (initialised to zeros) and the output is ``x_hat * (1 + w)`` computed entirely in float32, rounded once at the end
(``(x * w).to(dtype)``, transformers PR 29402) -- the opposite order to Llama's.

``weight_float32`` (HF ``Olmo2RMSNorm``, ``T5LayerNorm``): ``(weight * x_hat).to(dtype)``, the weight multiplied onto the
float32 ``x_hat`` and the product rounded once (the weight itself is not offset).

``weight=None``: a non-affine norm (``x_hat`` only, rounded to the input dtype).

LayerNorm is ``F.layer_norm`` in the input dtype, exactly what ``nn.LayerNorm`` runs (its kernels accumulate the
statistics in float32 internally for half types).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, zero_centred: bool = False, weight_float32: bool = False
) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return apply_rms_weight(h, weight, x.dtype, zero_centred, weight_float32)


def apply_rms_weight(
    h: torch.Tensor, weight: torch.Tensor | None, dtype: torch.dtype, zero_centred: bool = False,
    weight_float32: bool = False,
) -> torch.Tensor:
    """The float32 ``x_hat`` -> output in ``dtype``, with the weight in each convention's order (module docstring)."""
    if weight is None:
        return h.to(dtype)
    if zero_centred:
        return (h * (1.0 + weight.float())).to(dtype)
    if weight_float32:
        return (weight * h).to(dtype)
    return weight * h.to(dtype)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None, eps: float, zero_centred: bool = False,
    weight_float32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual = x + residual; return rms_norm(residual), residual`` (the fused residual-add + norm of vLLM/ATOM).

    With ``residual=None`` (first layer) the input itself becomes the residual stream.
    """
    if residual is not None:
        x = x + residual
    return rms_norm(x, weight, eps, zero_centred, weight_float32), x


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def add_layer_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual = x + residual; return layer_norm(residual), residual`` (as :func:`add_rms_norm`)."""
    if residual is not None:
        x = x + residual
    return layer_norm(x, weight, bias, eps), x


def all_reduce_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None, eps: float, zero_centred: bool = False,
    weight_float32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` is this rank's partial sum of a row-parallel output: ``residual = all_reduce(x) + residual; return
    rms_norm(residual), residual`` -- the fused all-reduce + residual-add + RMSNorm of ATOM's decoder layers.

    Backends, first that applies: aiter's fused kernel (``aiter.dist.communication_op.
    tensor_model_parallel_fused_allreduce_rmsnorm``, one launch; only when aiter imports, its own TP group is set up
    with this world size, the tensors are on a GPU and the norm is the plain affine Llama one); then the Triton
    one-launch kernel over CUDA symmetric memory (``gpu/allreduce_norm.py``: NCCL default world of 2..8 GPUs, small
    messages, every affine convention; ``MODELGEN_FUSED_ALLREDUCE_NORM=0`` turns it off for A/B); otherwise one
    all-reduce followed by the fused add + RMSNorm (the Triton kernel on the GPU path, the torch reference here on the
    CPU). At world size 1 it is exactly :func:`add_rms_norm`.
    """
    from .. import distributed as dist

    if dist.tp_size() > 1:
        fused = _aiter_all_reduce_rms_norm(x, residual, weight, eps, zero_centred, weight_float32)
        if fused is None:
            fused = _triton_all_reduce_rms_norm(x, residual, weight, eps, zero_centred, weight_float32)
        if fused is not None:
            return fused
        x = dist.all_reduce(x)
    from . import gpu

    if gpu.enabled(x) and weight is not None and not weight_float32:
        from .gpu import norm as gpu_norm

        return gpu_norm.add_rms_norm(x, residual, weight, eps, zero_centred)
    return add_rms_norm(x, residual, weight, eps, zero_centred, weight_float32)


def _triton_all_reduce_rms_norm(x, residual, weight, eps, zero_centred, weight_float32):
    """The Triton one-launch kernel (``gpu/allreduce_norm.py``), or None where it does not apply (it checks the
    group, sizes and switches itself)."""
    if not x.is_cuda or weight is None:
        return None
    from . import gpu

    if not gpu.enabled(x):
        return None
    from .gpu import allreduce_norm

    return allreduce_norm.all_reduce_add_rms_norm(x, residual, weight, eps, zero_centred, weight_float32)


def _aiter_all_reduce_rms_norm(x, residual, weight, eps, zero_centred, weight_float32):
    """aiter's one-launch all-reduce + add + RMSNorm, or None where it does not apply (see the caller)."""
    if not x.is_cuda or residual is None or weight is None or zero_centred or weight_float32:
        return None
    from .. import distributed

    if distributed.tp_group() is not None:  # PP x TP / DP x TP: our TP group is a sub-group, aiter's is the world
        return None
    from . import gpu

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

            from .. import distributed as dist

            # aiter reduces over its own process group: usable only when it was initialised for our world.
            if get_tensor_model_parallel_world_size() == dist.tp_size():
                _AITER["op"] = tensor_model_parallel_fused_allreduce_rmsnorm
        except Exception:  # not installed, or installed without its TP group initialised
            pass
    return _AITER["op"]


_AITER: dict = {}
