"""FP8 block-scaled weights (DeepSeek-V3 / Qwen3-FP8 checkpoints: ``quant_method: fp8``, ``weight_block_size``).

A quantized linear weight ``W [out, in]`` is stored as ``float8_e4m3fn`` beside ``weight_scale_inv
[ceil(out / bo), ceil(in / bi)]`` (float32): block ``(i, j)`` of W is ``W_fp8[block] * scale_inv[i, j]`` (the name
says "inverse" because the quantizer divided by it: DeepSeek's ``weight_dequant`` and transformers'
``FP8Linear``/``Fp8Dequantize`` multiply). Edge blocks are partial when out or in is not a multiple of the block.

The torch path dequantizes each tensor when it is read (runtime/loader/quantization.py ``Fp8DequantCheckpoint``), one
tensor at a time: host memory holds the FP8 checkpoint mapping plus one upcast tensor, never an upcast checkpoint.
"""
from __future__ import annotations

import torch

from ..ops import gpu

FP8_DTYPES = tuple(d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)) if d)


def scale_shape(shape: tuple[int, ...], block: tuple[int, int]) -> tuple[int, ...]:
    """``[..., ceil(out / bo), ceil(in / bi)]`` for a weight of ``shape`` (leading dims: stacked experts)."""
    return (*shape[:-2], -(-shape[-2] // block[0]), -(-shape[-1] // block[1]))


def dequantize_block_fp8(
    weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int], dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``W_fp8 [..., out, in]`` x per-block ``scale_inv`` -> ``dtype``; computed in float32 (one rounding to
    ``dtype``)."""
    out, inp = weight.shape[-2:]
    scale = scale_inv.float().repeat_interleave(block[0], -2)[..., :out, :].repeat_interleave(block[1], -1)[..., :inp]
    return (weight.float() * scale).to(dtype)


def quantize_block_fp8(
    weight: torch.Tensor, block: tuple[int, int], fp8_dtype: torch.dtype = torch.float8_e4m3fn
) -> tuple[torch.Tensor, torch.Tensor]:
    """The quantizer DeepSeek's checkpoints were made with: per block, ``scale_inv = amax / fp8_max``, weight
    ``W / scale_inv`` rounded to FP8. Returns ``(W_fp8, scale_inv float32)``; used to build test checkpoints."""
    out, inp = weight.shape
    rows, cols = scale_shape((out, inp), block)
    padded = torch.zeros(rows * block[0], cols * block[1], dtype=torch.float32, device=weight.device)
    padded[:out, :inp] = weight.float()
    tiles = padded.view(rows, block[0], cols, block[1])
    amax = tiles.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale_inv = amax / torch.finfo(fp8_dtype).max
    q = (tiles / scale_inv[:, None, :, None]).view_as(padded)[:out, :inp].to(fp8_dtype)
    return q, scale_inv


_block_fp8_linear = None


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int],
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ dequant(weight, scale_inv).T + bias`` for a weight kept in FP8 (``LinearBase.keep_fp8``): the block-scaled
    Triton GEMM on the GPU path (``runtime/ops/gpu/fp8.py``: the FP8 bytes are read and widened in registers); elsewhere
    (``MODELGEN_BACKEND=torch`` on a model loaded for the GPU path) the weight is dequantized for the call, the same
    function at the torch path's speed."""
    global _block_fp8_linear
    if gpu.enabled(x):
        if _block_fp8_linear is None:  # imports Triton: only on the GPU path
            from ..ops.gpu.fp8 import block_fp8_linear as _block_fp8_linear
        return _block_fp8_linear(x, weight, scale_inv, block, bias=bias)
    return torch.nn.functional.linear(x, dequantize_block_fp8(weight, scale_inv, block, x.dtype), bias)
