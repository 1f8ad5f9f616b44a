"""MoE routing modes on the vllm target that vLLM's ``FusedMoEFactory`` takes as a ``custom_routing_function``.

``topk_sigmoid`` (Llama 4's router: top-k over the logits, each weight the sigmoid of its own logit) is vLLM's own
``Llama4MoE.custom_routing_function`` (its kernels recognise that function by identity). A p-norm renormalisation
other than the sum (DBRX ``moe_normalize_expert_weights``) is the torch reference of ``ops.route``: softmax over every
expert in float32, top-k, the k weights divided by their p-norm. vLLM's CPU router (``router/cpu_router.py``) calls
either with ``(hidden_states, gating_output, topk, renormalize)``.

vLLM applies a routing weight to the expert input (``apply_router_weight_on_input``, Llama 4) for top-k 1 only
(``MoEPrepareAndFinalizeNoDPEPModular.prepare`` asserts it): :func:`check_weight_on_input` refuses other top-k at
construction, naming the config field, instead of failing inside the first forward. Imported only by generated vllm
modules.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch

from .ops import route


def _p_norm_topk(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int, renormalize: bool, *,
                 scoring: str, p: float) -> tuple[torch.Tensor, torch.Tensor]:
    weights, ids = route(gating_output, topk, scoring=scoring, renormalize=renormalize, renormalize_p=p)
    return weights, ids.to(torch.int32)


def moe_routing_function(scoring: str, renormalize_p: float = 1.0) -> Callable:
    """The ``custom_routing_function`` for ``scoring`` (``topk_sigmoid``) or a p-norm renormalisation."""
    if scoring == "topk_sigmoid":
        from vllm.model_executor.models.llama4 import Llama4MoE

        return Llama4MoE.custom_routing_function
    return functools.partial(_p_norm_topk, scoring=scoring, p=float(renormalize_p))


def check_weight_on_input(top_k: int, field: str) -> None:
    """ValueError naming ``field`` unless ``top_k`` is 1 (vLLM's fused MoE weights the input for top-k 1 only)."""
    if top_k != 1:
        raise ValueError(f"{field} = {top_k}: vLLM's fused MoE applies the routing weight to the expert input "
                         "(apply_router_weight_on_input) for top-k 1 only; serve this model on the rocm target")
