"""FP8 block-scaled MoE experts kept in FP8 on the GPU path (``LLM(quantized_weights="keep")`` on a DeepSeek-V3-style
FP8 checkpoint whose experts are FP8).

The experts load as the bf16 path loads them (the checkpoint view dequantizes each expert tensor, the rocm loader
stacks experts, shared-expert slots, expert ranges and TP slices as for any checkpoint), then
``process_weights_after_loading`` re-encodes each expert matrix to float8_e4m3fn with one ``scale_inv`` per block of
the checkpoint's block size, frees the bf16 copy, and ``FusedMoE.quant_method`` runs
``runtime/layers/moe/kernels_fp8.py``.

Why re-encoding gives back the checkpoint's FP8 codes: a stacked expert's blocks are the checkpoint's blocks (the
intermediate size, and each rank's slice of it, are whole blocks: checked), the loaded weight is ``round_bf16(q * s)``,
and the re-encoding takes ``s' = amax / 448`` per block. For a block quantized the way DeepSeek's checkpoints are
(``s = amax / 448``, so ``|q| = 448`` at the maximum) ``s' = round_bf16(448 s) / 448 = s (1 + e)``, ``|e| <= 2^-9``, and
``round_fp8(round_bf16(q s) / s') = q``: e4m3 codes are 2^-3 apart relative (2^-9 absolute below 2^-6), far more than
the two bf16 roundings move them. The scale differs from the checkpoint's by that one bf16 rounding, the error the
dequantized path has anyway. (tests/test_fp8_keep.py checks the codes are the checkpoint's.)
"""
from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from ...ops import gpu
from ..fp8 import dequantize_block_fp8, quantize_block_fp8, scale_shape
from .layer import FusedMoE


class Fp8MoEMethod:
    """``FusedMoE.quant_method`` of FP8 block-scaled experts: the Triton kernels on the GPU path, else (the torch
    backend forced after loading) the reference on experts dequantized for the call."""

    def __init__(self, block: tuple[int, int]):
        self.block = block

    def apply(self, layer: FusedMoE, hidden: torch.Tensor, topk_weights: torch.Tensor,
              topk_ids: torch.Tensor) -> torch.Tensor:
        S = layer.num_shared_experts if layer.shared_active else 0
        if gpu.enabled(hidden):
            from .kernels_fp8 import fused_moe_fp8, supported

            if supported(hidden, layer.activation, layer.w13_weight, self.block):
                return fused_moe_fp8(hidden, layer.w13_weight, layer.w13_scale_inv, layer.w2_weight,
                                     layer.w2_scale_inv, topk_weights, topk_ids, self.block,
                                     expert_offset=layer.expert_offset, num_local_experts=layer.num_local_experts,
                                     num_shared=S)
        from .ops import fused_moe

        w13 = _dequantize_stacked(layer.w13_weight, layer.w13_scale_inv, self.block, hidden.dtype)
        w2 = _dequantize_stacked(layer.w2_weight, layer.w2_scale_inv, self.block, hidden.dtype)
        if layer.num_shared_experts:
            topk_weights, topk_ids = layer._with_shared_slots(topk_weights, topk_ids)
            offset, num_local = 0, layer.num_local_experts + layer.num_shared_experts
        else:
            offset, num_local = layer.expert_offset, layer.num_local_experts
        return fused_moe(hidden, w13, w2, topk_weights, topk_ids, layer.act, expert_offset=offset,
                         num_local_experts=num_local if (layer.expert_parallel or layer.num_shared_experts) else None,
                         accumulate="sum", global_num_experts=num_local if layer.num_shared_experts else layer.num_experts)


def _dequantize_stacked(w: torch.Tensor, s: torch.Tensor, block: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    return torch.stack([dequantize_block_fp8(w[e], s[e], block, dtype) for e in range(w.shape[0])])


def _quantize_stacked(w: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """One expert matrix at a time into preallocated outputs (the float32 intermediate of one expert, no list)."""
    q = torch.empty(w.shape, dtype=torch.float8_e4m3fn, device=w.device)
    s = torch.empty(scale_shape(tuple(w.shape), block), dtype=torch.float32, device=w.device)
    for e in range(w.shape[0]):
        q[e], s[e] = quantize_block_fp8(w[e], block)
    return q, s


def _requantize(layer: FusedMoE, block: tuple[int, int]) -> None:
    for name in ("w13", "w2"):
        q, s = _quantize_stacked(getattr(layer, f"{name}_weight").data, block)
        setattr(layer, f"{name}_weight", nn.Parameter(q, requires_grad=False))
        setattr(layer, f"{name}_scale_inv", nn.Parameter(s, requires_grad=False))
    layer.quant_method = Fp8MoEMethod(block)


def keep_fp8(layer: FusedMoE, block: tuple[int, int]) -> bool:
    """Mark ``layer`` to re-encode its experts in FP8 after loading; False (unchanged) where the kernels or the
    block alignment do not allow it: SiLU experts without biases, each rank's intermediate slice whole blocks."""
    bn, bk = block
    I = layer.intermediate_size
    if (layer.activation != "silu" or layer.w13_bias is not None or getattr(layer, "quant_method", None) is not None
            or I % bn or I % bk):
        return False
    layer.process_weights_after_loading = functools.partial(_requantize, layer, block)
    return True


def keep_fp8_experts(model: nn.Module, checkpoint: Any) -> int:
    """Mark every FusedMoE whose MoE block's checkpoint weights (routed and shared experts: every ``*proj.weight`` or
    fused expert tensor under the block, the router excluded) are all FP8; returns how many layers."""
    fp8 = set(checkpoint.fp8_keys())
    by_block: dict[str, list[str]] = {}  # "model.layers.N.mlp." -> its experts' / shared experts' weight keys
    for k in checkpoint.keys():
        parts = k.split(".")
        i = next((i for i, p in enumerate(parts) if "experts" in p), None)
        if i is not None and not k.endswith(("_scale_inv", "bias")):
            by_block.setdefault(".".join(parts[:i]) + ".", []).append(k)
    n = 0
    for name, module in model.named_modules():
        if not isinstance(module, FusedMoE):
            continue
        expert_keys = by_block.get(name.rsplit(".", 1)[0] + ".", [])
        if expert_keys and all(k in fp8 for k in expert_keys) and keep_fp8(module, checkpoint.block):
            n += 1
    return n
