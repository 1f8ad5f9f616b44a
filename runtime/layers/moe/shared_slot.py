"""A sigmoid-gated shared expert run as one more slot of the fused MoE kernels (Qwen3-Next, GPU path).

HF's ``Qwen3NextSparseMoeBlock`` adds ``F.sigmoid(shared_expert_gate(x)) * shared_expert(x)`` to the routed experts'
sum. Run as separate modules that is ~8 launches a layer besides the routed experts (the shared MLP's gate-up GEMV,
SiLU-mul, down GEMV, the 1-column gate linear (cuBLAS dot + reduce), the sigmoid, the multiply, the add): measured on
the H200 at the Qwen3-Next-80B-A3B shape, batch 1 decodes at 43.8% of its HBM roofline, launch-bound
(bench/NOTES-gdn.md). Here, after loading (:func:`fold`):

- the shared_expert_gate row is row E of one router weight ``[E + 1, H]`` (the router's own ``[E, H]`` a view of its
  first E rows), so one GEMV gives both the routing logits and the gate logit;
- the shared expert is slot E of stacked experts ``w13 [E + 1, 2I, H]`` / ``w2 [E + 1, H, I]`` (FusedMoE's own
  parameters and the shared MLP's weights are views into them: the weights are held once);

and :func:`forward` runs the router GEMV, the route kernel (``SHARED_GATE``: column k = slot E with weight
``sigmoid(gate logit)`` in the model dtype) and the fused experts over k + 1 columns, each with its real weight: no
change to the expert kernels. Everywhere else (CPU torch path, TP/EP, aiter, a shared width other than the experts')
the block keeps its unfolded forward, whose numerics the parity tests compare with transformers.
"""
from __future__ import annotations

import torch
from torch import nn

from ... import backends
from ... import distributed as dist
from ...ops import gpu
from ..linear import linear

# Run the folded block on the GPU path (read at forward time; bench/gdn_ab.py times both legs in one process).
# The fold itself (weights as views into E + 1 slots) happens at load whenever the rules of ``_foldable`` hold; it
# does not change any value, only where the tensors live.
SHARED_SLOT = True


def _foldable(router: nn.Module, experts: nn.Module, mlp: nn.Module, gate: nn.Module) -> bool:
    """The named rules of the fold; a block that fails one keeps its separate shared expert."""
    gate_up = getattr(getattr(mlp, "gate_up_proj", None), "weight", None)
    down = getattr(getattr(mlp, "down_proj", None), "weight", None)
    gw = getattr(gate, "weight", None)
    if gate_up is None or down is None or gw is None:
        return False  # a shared MLP without a fused gate_up_proj / down_proj
    if dist.tp_size() != 1 or experts.expert_parallel or experts.moe_tp_size != 1:
        return False  # TP/EP: each rank would need the slot on one rank only; the unfolded path all-reduces
    if backends.active("rocm") == "aiter" or experts.backend == "aiter" or router.backend == "aiter":
        return False  # aiter's fused_moe keeps its own path
    if experts.num_shared_experts or experts.quant_method is not None or experts.w13_bias is not None:
        return False  # slots already used (GLM), quantized experts, expert biases
    if not experts.gated or experts.weight_on_input or experts.activation_params is not None:
        return False  # the expert kernels' plain gated path only
    if router.bias is not None or router.e_score_correction_bias is not None or (router.n_group or 1) > 1:
        return False  # the gate row would be biased / grouped with the experts
    if router.float32 or router.scoring == "topk_softmax":
        return False  # fp32 router weight (gate row is model dtype); top-k-then-softmax scoring
    if any(getattr(getattr(mlp, n), "bias", None) is not None for n in ("gate_up_proj", "down_proj")):
        return False
    if getattr(gate, "bias", None) is not None or tuple(gw.shape) != (1, router.weight.shape[1]):
        return False
    # Shared width == the experts' (Qwen3-Next 512 == 512); Qwen2-MoE's 4x wider shared expert is refused here.
    if tuple(gate_up.shape) != tuple(experts.w13_weight.shape[1:]) or tuple(down.shape) != tuple(experts.w2_weight.shape[1:]):
        return False
    dtypes = {gate_up.dtype, down.dtype, experts.w13_weight.dtype, experts.w2_weight.dtype, router.weight.dtype, gw.dtype}
    devices = {t.device for t in (gate_up, down, experts.w13_weight, experts.w2_weight, router.weight, gw)}
    return len(dtypes) == 1 and len(devices) == 1


def _stack(base: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
    out = torch.empty((base.shape[0] + 1, *base.shape[1:]), dtype=base.dtype, device=base.device)
    out[:-1].copy_(base)
    out[-1].copy_(extra.reshape(base.shape[1:]))
    return out


def fold(router: nn.Module, experts: nn.Module, mlp: nn.Module, gate: nn.Module) -> bool:
    """Post-load: move the shared MLP into slot E of the stacked experts and the gate row into row E of the router
    weight; every original parameter becomes a view into the new tensors (held once). Returns whether it folded."""
    if getattr(experts, "shared_slot", False) or not _foldable(router, experts, mlp, gate):
        return False
    E = experts.num_local_experts
    with torch.no_grad():
        w13 = _stack(experts.w13_weight.data, mlp.gate_up_proj.weight.data)
        experts.w13_weight.data = w13[:E]
        mlp.gate_up_proj.weight.data = w13[E]
        w2 = _stack(experts.w2_weight.data, mlp.down_proj.weight.data)
        experts.w2_weight.data = w2[:E]
        mlp.down_proj.weight.data = w2[E]
        rw = _stack(router.weight.data, gate.weight.data)
        router.weight.data = rw[:E]
        gate.weight.data = rw[E:]
    experts.w13_slots, experts.w2_slots, router.weight_with_gate = w13, w2, rw
    experts.shared_slot = True
    return True


def active(router: nn.Module, experts: nn.Module, hidden_states: torch.Tensor) -> bool:
    """Take the folded forward: switch on, folded (and the parameters still views of the slots: a later ``.to()``
    would have copied them apart), the Triton GPU path for this input."""
    if not (SHARED_SLOT and getattr(experts, "shared_slot", False) and gpu.enabled(hidden_states)):
        return False
    if experts.w13_weight.data_ptr() != experts.w13_slots.data_ptr() or router.weight.data_ptr() != router.weight_with_gate.data_ptr():
        return False
    from . import kernels as gpu_moe

    return router._gpu(hidden_states) and gpu_moe.supported(hidden_states, experts.w13_slots, experts.activation)


def forward(router: nn.Module, experts: nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
    """Routed experts + the gated shared expert in the router GEMV, the route kernel and the fused experts."""
    from . import kernels as gpu_moe

    topk_weights, topk_ids = gpu_moe.router(
        hidden_states, router.weight_with_gate, router.top_k, scoring=router.scoring, renormalize=router.renormalize,
        routed_scaling_factor=router.routed_scaling_factor,
        out_dtype=hidden_states.dtype if router.weights_in_model_dtype else torch.float32, gemm=linear,
        shared_gate=True,
    )
    return gpu_moe.fused_moe(
        hidden_states, experts.w13_slots, experts.w2_slots, topk_weights, topk_ids, experts.activation,
        num_local_experts=experts.num_local_experts + 1,
    )
