"""The MXFP4 codec (OCP microscaling FP4, as transformers ``integrations/mxfp4.py`` packs it): 32 E2M1 values per
group, two per byte, one E8M0 scale per group. The checkpoint view that dequantizes at load is
``runtime/loader/mxfp4.py``; the MoE layer that keeps experts packed (``runtime/layers/moe/mxfp4.py``) unpacks with
the same functions, which is why they live here, below both.
"""
from __future__ import annotations

import torch

# E2M1 code -> value (transformers' FP4_VALUES): codes 0-7 positive, 8-15 the same magnitudes negated.
FP4_VALUES = (+0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
GROUP = 32  # values per E8M0 scale
SCALE_BIAS = 127
BLOCKS_SUFFIX, SCALES_SUFFIX = "_blocks", "_scales"



def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """``X_blocks [E, R, G, 16]`` + ``X_scales [E, R, G]`` -> ``X [E, 32 G, R]`` in ``dtype``, value for value what
    transformers' ``convert_moe_packed_tensors`` computes (table lookup in ``dtype``, then ``ldexp``: FP4 values
    times powers of two are exact in bf16 and fp32 alike)."""
    if blocks.dtype != torch.uint8 or scales.dtype != torch.uint8:
        raise ValueError(f"MXFP4 blocks and scales must be uint8, got {blocks.dtype} and {scales.dtype}")
    if blocks.dim() < 3 or tuple(blocks.shape[:-1]) != tuple(scales.shape) or blocks.shape[-1] != GROUP // 2:
        raise ValueError(f"MXFP4 blocks {tuple(blocks.shape)} and scales {tuple(scales.shape)} do not pair: expected "
                         f"blocks [..., G, {GROUP // 2}] and scales [..., G]")
    lut = torch.tensor(FP4_VALUES, dtype=dtype, device=blocks.device)
    *prefix, G, B = blocks.shape
    out = torch.empty(*prefix, G, 2 * B, dtype=dtype, device=blocks.device)
    out[..., 0::2] = lut[(blocks & 0x0F).long()]
    out[..., 1::2] = lut[(blocks >> 4).long()]
    out = torch.ldexp(out, (scales.to(torch.int32) - SCALE_BIAS)[..., None]).to(dtype)
    return out.reshape(*prefix, G * 2 * B).transpose(1, 2).contiguous()


def quantize_mxfp4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse layout of :func:`dequantize_mxfp4`: ``X [E, 32 G, R]`` -> ``(X_blocks, X_scales)``.

    Per 32-value group the scale is the smallest power of two that brings the group's largest magnitude within 6
    (the largest E2M1 value), and each value rounds to the nearest E2M1 value (ties to the lower magnitude). Used to
    build MXFP4 checkpoints from bf16 ones (tests, conversions); not a calibrated quantizer."""
    if weight.dim() != 3 or weight.shape[1] % GROUP:
        raise ValueError(f"quantize_mxfp4: expected [E, K, R] with K a multiple of {GROUP}, got {tuple(weight.shape)}")
    E, K, R = weight.shape
    x = weight.float().transpose(1, 2).reshape(E, R, K // GROUP, GROUP)
    amax = x.abs().amax(dim=-1, keepdim=True)
    exp = torch.ceil(torch.log2(amax.clamp(min=torch.finfo(torch.float32).tiny) / 6.0))
    exp = exp.clamp(-SCALE_BIAS, SCALE_BIAS)
    scaled = x / torch.pow(2.0, exp)
    magnitudes = torch.tensor(FP4_VALUES[:8], device=weight.device)
    code = (scaled.abs()[..., None] - magnitudes).abs().argmin(dim=-1)  # nearest magnitude, lowest on ties
    code = code + 8 * (scaled < 0).long()
    code = code.to(torch.uint8)
    blocks = code[..., 0::2] | (code[..., 1::2] << 4)
    scales = (exp[..., 0] + SCALE_BIAS).to(torch.uint8)
    return blocks.contiguous(), scales.contiguous()
