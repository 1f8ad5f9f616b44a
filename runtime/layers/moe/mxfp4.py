"""MXFP4 experts kept as released on the GPU path (``LLM(quantized_weights="keep")`` on an MXFP4 checkpoint).

``keep_mxfp4_experts`` (``runtime/loader/mxfp4.py``, at load) switches each
:class:`~modelgen.runtime.layers.moe.FusedMoE` whose fused expert tensors the checkpoint stores as MXFP4 (gpt-oss:
``mlp.experts.{gate_up_proj,down_proj}_{blocks,scales}``) before loading: the bf16 ``w13_weight`` / ``w2_weight`` are
replaced by parameters named like the checkpoint tensors, which the rocm loader then fills directly (this rank's experts
and, when experts are TP-sharded, its intermediate slice), and the layer's ``quant_method`` runs
``runtime/layers/moe/kernels_mxfp4.py``. The biases stay the layer's own (bf16, stacked). Layouts the kernels do not
take (other fused layouts or activations, shared-expert slots, an intermediate slice that splits a 32-value scale group)
are left dequantized.

Memory: 4.25 bits per expert weight (a byte per two values + a byte per 32) instead of 16.
"""
from __future__ import annotations

import torch
from torch import nn

from ...ops import gpu
from ...ops.mxfp4 import GROUP, dequantize_mxfp4
from .layer import FusedMoE

PARTS = {"gate_up_proj": "w13", "down_proj": "w2"}


class Mxfp4MoEMethod:
    """``FusedMoE.quant_method`` of MXFP4 experts: the Triton kernels on the GPU path, else (the torch backend
    forced after loading) the reference on weights dequantized for the call."""

    def apply(self, layer: FusedMoE, hidden: torch.Tensor, topk_weights: torch.Tensor,
              topk_ids: torch.Tensor) -> torch.Tensor:
        params = layer.activation_params or {}
        if gpu.enabled(hidden):
            from .kernels_mxfp4 import fused_moe_mxfp4

            return fused_moe_mxfp4(
                hidden, layer.gate_up_proj_blocks, layer.gate_up_proj_scales, layer.down_proj_blocks,
                layer.down_proj_scales, topk_weights, topk_ids, activation=layer.activation,
                alpha=params.get("alpha", 1.702), limit=params.get("limit", 7.0), w13_bias=layer.w13_bias,
                w2_bias=layer.w2_bias, expert_offset=layer.expert_offset,
            )
        from .ops import fused_moe, stacked_from_fused

        w13 = stacked_from_fused(dequantize_mxfp4(layer.gate_up_proj_blocks, layer.gate_up_proj_scales,
                                                  hidden.dtype), "w13", layer.fused_layout)
        w2 = stacked_from_fused(dequantize_mxfp4(layer.down_proj_blocks, layer.down_proj_scales, hidden.dtype),
                                "w2", layer.fused_layout)
        return fused_moe(hidden, w13, w2, topk_weights, topk_ids, layer.act, expert_offset=layer.expert_offset,
                         num_local_experts=layer.num_local_experts, accumulate="sum",
                         global_num_experts=layer.num_experts, w13_bias=layer.w13_bias, w2_bias=layer.w2_bias)


def _convertible(layer: FusedMoE) -> bool:
    I_local = layer.intermediate_size
    return (layer.fused_layout == "interleaved_transposed" and layer.activation in ("clamped_swiglu", "silu")
            and layer.num_shared_experts == 0 and I_local % GROUP == 0 and layer.w13_weight.shape[2] % GROUP == 0
            and getattr(layer, "quant_method", None) is None)


def _loader(layer: FusedMoE, part: str, what: str):
    """Loader of a whole ``[E, R, G(, 16)]`` checkpoint tensor: this rank's experts, then (TP-sharded experts) its
    intermediate slice: rows ``[2 r I_l, 2 (r + 1) I_l)`` of the interleaved gate/up rows (gate j and up j sit at rows
    2j, 2j + 1, so a gate/up column range is one row range), scale groups ``[r I_l / 32, ...)`` of the down inputs."""
    def load(param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        want = (layer.num_experts, *_full_shape(layer, part, param.shape[1:]))
        if tuple(loaded.shape) != want:
            raise ValueError(f"MXFP4 {part}_{what}: checkpoint tensor has shape {tuple(loaded.shape)}, expected {want}")
        t = loaded.narrow(0, layer.expert_offset, layer.num_local_experts)
        r, I_l = layer.moe_tp_rank, layer.intermediate_size
        if layer.moe_tp_size > 1:
            t = t.narrow(1, 2 * r * I_l, 2 * I_l) if part == "gate_up_proj" else t.narrow(2, r * I_l // GROUP,
                                                                                          I_l // GROUP)
        param.data.copy_(t)
    return load


def _full_shape(layer: FusedMoE, part: str, local: tuple[int, ...]) -> tuple[int, ...]:
    t = layer.moe_tp_size
    if part == "gate_up_proj":
        return (local[0] * t, *local[1:])
    return (local[0], local[1] * t, *local[2:])


def keep_mxfp4(layer: nn.Module | None) -> bool:
    """Switch ``layer`` to MXFP4 expert parameters (before loading); False (unchanged) when it is no FusedMoE (the
    loader asks of whatever module a checkpoint name lands on) or the kernels cannot run it (see the module
    docstring)."""
    if not isinstance(layer, FusedMoE) or not _convertible(layer):
        return False
    L, H, I = layer.num_local_experts, layer.w13_weight.shape[2], layer.intermediate_size
    dev = layer.w13_weight.device
    shapes = {"gate_up_proj": (L, 2 * I, H // GROUP), "down_proj": (L, H, I // GROUP)}
    del layer.w13_weight, layer.w2_weight
    for part, (l_, rows, groups) in shapes.items():
        for what, shape in (("blocks", (l_, rows, groups, GROUP // 2)), ("scales", (l_, rows, groups))):
            p = nn.Parameter(torch.empty(shape, dtype=torch.uint8, device=dev), requires_grad=False)
            p.weight_loader = _loader(layer, part, what)
            setattr(layer, f"{part}_{what}", p)
    layer.quant_method = Mxfp4MoEMethod()
    return True
