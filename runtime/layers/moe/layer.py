"""MoE modules for the rocm target: a top-k router and the fused experts (ATOM's FusedMoE role).

Experts are stacked ``w13_weight [E_local, 2I, H]`` (gate rows, then up rows) and ``w2_weight [E_local, H, I]``
(``runtime/layers/moe/ops.py``). Parallelism is expert parallelism: rank r owns the contiguous experts
``[r * E_local, (r + 1) * E_local)``, computes their contribution for every token, and the partial outputs are summed
across ranks. ``weight_loader`` accepts a per-expert checkpoint tensor (shard ``w1``/``w3``/``w2`` + expert id) or a
transformers v5 fused tensor of all experts (shard ``w13``/``w2``, no expert id); other ranks' experts are skipped.
With ``expert_parallel_size`` below the world size (``runtime/distributed.py`` ``moe_layout``) each expert is also
TP-sharded (ATOM's Mixtral "FusedMoE with TP sharding"): rank r keeps intermediate rows ``[r_tp * I_local, ...)`` of
its experts' gate/up and the same columns of down, so ``num_experts`` need not divide the world; the partial outputs
are summed by the same all-reduce.

On a CUDA GPU with Triton (the ``triton`` backend, ``runtime.ops.gpu.enabled``) both modules run the kernels of
``runtime/layers/moe/kernels.py``: the router's softmax/sigmoid + top-k in one launch, the experts as align + gate-up +
down + combine, without host syncs, so prefill and CUDA-graph decode take the same path. Elsewhere the torch references
of ``runtime/layers/moe/ops.py`` run, and so do, on the GPU too, the modes the kernels do not implement (each routed
by a named rule, never approximated): Llama 4's top-k-then-sigmoid router and its routing weight on the expert input
(``weight_on_input``), Nemotron-H's non-gated experts (``gated=False``), a p-norm renormalisation other than the sum
(DBRX).
"""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

from ... import backends
from ... import distributed as dist
from ...ops import gpu
from ..kind import LayerKind
from ..linear import linear
from .ops import expert_activation, experts_from_flat, fused_moe, fused_moe_static, route, stacked_from_fused


# Router scorings the Triton router kernel implements (runtime/layers/moe/kernels.py ``router``).
KERNEL_SCORINGS = ("softmax", "sigmoid", "topk_softmax")


class TopKRouter(nn.Module):
    """Router linear ``[E, H]`` + top-k selection (HF ``*TopKRouter``); returns (weights, expert ids)."""

    def __init__(
        self,
        hidden_size: int,
        num_experts: int,
        *,
        top_k: int,
        scoring: str,
        renormalize: bool,
        n_group: int | None = None,
        topk_group: int | None = None,
        correction_bias: bool = False,
        routed_scaling_factor: float = 1.0,
        float32: bool = False,
        weights_in_model_dtype: bool = False,
        bias: bool = False,
        group_score: str = "top2_sum",
        renormalize_p: float = 1.0,
    ):
        super().__init__()
        self.top_k, self.scoring, self.renormalize = top_k, scoring, renormalize
        self.renormalize_p = renormalize_p
        self.n_group, self.topk_group, self.group_score = n_group, topk_group, group_score
        self.routed_scaling_factor = routed_scaling_factor
        self.float32, self.weights_in_model_dtype = float32, weights_in_model_dtype
        dtype = torch.float32 if float32 else None
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size, dtype=dtype), requires_grad=False)
        if correction_bias:  # selection-only bias (DeepSeek-V3 / GLM4-MoE), always float32
            self.e_score_correction_bias = nn.Parameter(torch.empty(num_experts, dtype=torch.float32), requires_grad=False)
        else:
            self.register_parameter("e_score_correction_bias", None)
        if bias:  # a bias of the router linear itself (GPT-OSS router.bias): part of the logits
            self.bias = nn.Parameter(torch.empty(num_experts, dtype=dtype), requires_grad=False)
        else:
            self.register_parameter("bias", None)
        self.backend = backends.active("rocm")

    def _gpu(self, x: torch.Tensor) -> bool:
        # The router kernel does not know groups ranked by their maximum / softmax groups (DeepSeek-V2
        # group_limited_greedy): those take the reference. GPT-OSS's top-k-then-softmax with its linear bias runs
        # the kernel (measured 1.066x the torch.topk + softmax route at gpt-oss bs1: bench/NOTES-moe.md).
        # Nor Llama 4's top-k-then-sigmoid scoring, nor a p-norm other than the sum (DBRX moe_normalize_expert_weights):
        # the kernel knows neither, so they take the reference too.
        grouped = (self.n_group or 1) > 1
        return (self.backend != "aiter" and gpu.enabled(x) and self.scoring in KERNEL_SCORINGS
                and not (self.renormalize and self.renormalize_p != 1.0)
                and not (grouped and (self.scoring == "softmax" or self.group_score != "top2_sum")))

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = hidden_states.float() if self.float32 else hidden_states
        if self._gpu(x):
            from . import kernels as gpu_moe

            # Qwen3-MoE's weights are cast to the logits' dtype by HF: the kernel stores them in that dtype directly.
            return gpu_moe.router(
                x, self.weight, self.top_k, scoring=self.scoring, renormalize=self.renormalize,
                n_group=self.n_group, topk_group=self.topk_group, e_score_correction_bias=self.e_score_correction_bias,
                routed_scaling_factor=self.routed_scaling_factor,
                out_dtype=x.dtype if self.weights_in_model_dtype else torch.float32, gemm=linear, bias=self.bias,
            )
        logits = F.linear(x, self.weight, self.bias)
        weights, ids = route(
            logits, self.top_k, scoring=self.scoring, renormalize=self.renormalize, n_group=self.n_group,
            topk_group=self.topk_group, e_score_correction_bias=self.e_score_correction_bias,
            routed_scaling_factor=self.routed_scaling_factor, group_score=self.group_score, backend=self.backend,
            renormalize_p=self.renormalize_p,
        )
        if self.weights_in_model_dtype:  # Qwen3-MoE casts the top-k weights to the logits' dtype
            weights = weights.to(logits.dtype)
        return weights, ids


class FusedMoE(LayerKind):
    is_fused_moe = True

    def __init__(
        self, num_experts: int, hidden_size: int, intermediate_size: int, activation: str = "silu",
        num_shared_experts: int = 0, *, activation_params: dict[str, float] | None = None, bias: bool = False,
        fused_layout: str = "stacked", weight_on_input: bool = False, gated: bool = True,
    ):
        """``activation_params``: the parameters of a parametric activation (clamped_swiglu: alpha, limit);
        ``bias``: per-expert ``w13_bias [E, 2I]`` and ``w2_bias [E, H]`` (GPT-OSS); ``fused_layout``: the layout of
        the checkpoint's fused all-experts tensors (``runtime/layers/moe/ops.py`` ``stacked_from_fused``);
        ``weight_on_input``: the routing weight scales each selected expert's input, not its output (Llama 4);
        ``gated=False``: non-gated experts ``down(act(up(x)))`` (Nemotron-H): ``w13 [E, I, H]`` holds the up
        projection alone (checkpoint shard ``w1``, as vLLM maps a non-gated expert's up_proj) and ``activation`` is an
        elementwise one (relu2)."""
        super().__init__()
        world = dist.tp_size()
        layout = dist.moe_layout(num_experts)
        self.num_experts = num_experts
        self.num_local_experts = layout.num_local_experts
        self.expert_offset = layout.expert_offset
        # TP sharding inside each expert: this rank's slice of the intermediate dimension.
        self.moe_tp_size, self.moe_tp_rank = layout.tp_size, layout.tp_rank
        self.full_intermediate_size = intermediate_size
        intermediate_size = dist.divide(intermediate_size, layout.tp_size, "moe intermediate_size",
                                        by="ranks sharing each expert")
        self.intermediate_size = intermediate_size
        self.activation = activation
        self.activation_params = activation_params
        self.gated = gated
        self.act = expert_activation(activation, activation_params, gated)
        self.fused_layout = fused_layout
        self.weight_on_input = weight_on_input
        self.expert_parallel = world > 1
        # Shared experts as extra slots [L, L + S) after this rank's routed experts; every token visits them with
        # weight 1. Each rank holds them, but only the first expert-parallel group routes tokens there (the
        # all-reduce would count them twice); within that group each rank holds its TP slice of them.
        self.num_shared_experts = num_shared_experts
        self.shared_active = num_shared_experts > 0 and layout.ep_rank == 0
        L, H, I = self.num_local_experts + num_shared_experts, hidden_size, intermediate_size
        self.w13_weight = nn.Parameter(torch.empty(L, (2 if gated else 1) * I, H), requires_grad=False)
        self.w2_weight = nn.Parameter(torch.empty(L, H, I), requires_grad=False)
        params = [self.w13_weight, self.w2_weight]
        if bias:
            if num_shared_experts or not gated:
                raise ValueError("FusedMoE: expert biases with fused shared-expert slots or non-gated experts are "
                                 "not supported")
            self.w13_bias = nn.Parameter(torch.empty(L, 2 * I), requires_grad=False)
            self.w2_bias = nn.Parameter(torch.empty(L, H), requires_grad=False)
            params += [self.w13_bias, self.w2_bias]
        else:
            self.register_parameter("w13_bias", None)
            self.register_parameter("w2_bias", None)
        for p in params:
            p.weight_loader = self.weight_loader
            p.is_expert_param = True
        self.backend = backends.active("rocm")
        # Experts kept in a checkpoint's quantized format (ATOM's quant_method): set with the matching parameters
        # before loading by runtime/layers/moe/mxfp4.py (MXFP4 on the GPU path); None = the bf16 weights above.
        self.quant_method = None

    def local_index(self, expert_id: int) -> int | None:
        e = expert_id - self.expert_offset
        return e if 0 <= e < self.num_local_experts else None

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id: str, expert_id: int | None = None) -> None:
        I = self.intermediate_size
        if shard_id.startswith("shared_"):
            self._load_shared(param, loaded, shard_id)
            return
        if expert_id is None and self.fused_layout == "flat":
            self._load_flat(param, loaded, shard_id)
            return
        if expert_id is None:  # fused tensor of every expert: [E, 2I, H] or [E, H, I] once in the stacked layout
            if shard_id in ("w13", "w2", "w13_bias", "w2_bias"):
                loaded = stacked_from_fused(loaded, shard_id, self.fused_layout)
            want = (self.num_experts, *self._full_shape(param.shape[1:], shard_id))
            if tuple(loaded.shape) != want:
                raise ValueError(f"fused experts ({shard_id}): checkpoint tensor has shape {tuple(loaded.shape)}, expected {want}")
            local = loaded.narrow(0, self.expert_offset, self.num_local_experts)
            param.data[: self.num_local_experts].copy_(self._tp_slice(local, shard_id))
            return
        e = self.local_index(expert_id)
        if e is None:
            return  # another rank's expert
        target = {"w1": param.data[e, :I], "w3": param.data[e, I:], "w2": param.data[e]}[shard_id]
        want = self._full_shape(target.shape, shard_id)
        if tuple(loaded.shape) != want:
            raise ValueError(f"expert {expert_id} {shard_id}: checkpoint tensor has shape {tuple(loaded.shape)}, expected {want}")
        target.copy_(self._tp_slice(loaded, shard_id))

    def _load_flat(self, param: nn.Parameter, loaded: torch.Tensor, shard_id: str) -> None:
        """DBRX's flat tensors of every expert (``w1`` gate / ``v1`` up / ``w2`` down, each ``[E * I, H]``): this
        rank's experts into the gate rows, up rows or down of the stacked parameters."""
        L, I = self.num_local_experts, self.intermediate_size
        if shard_id not in ("w1", "w3", "w2"):
            raise ValueError(f"flat experts: unknown shard {shard_id!r}; expected w1 (gate), w3 (up) or w2 (down)")
        local = experts_from_flat(loaded, shard_id, self.num_experts).narrow(0, self.expert_offset, L)
        target = {"w1": param.data[:L, :I], "w3": param.data[:L, I:], "w2": param.data[:L]}[shard_id]
        want = (L, *self._full_shape(target.shape[1:], shard_id))
        if tuple(local.shape) != want:
            raise ValueError(f"flat experts ({shard_id}): checkpoint tensor has shape {tuple(loaded.shape)}, "
                             f"expected {self.num_experts} experts of {want[1:]}")
        target.copy_(self._tp_slice(local, shard_id))

    def _full_shape(self, local: tuple[int, ...], shard_id: str) -> tuple[int, ...]:
        """The checkpoint shape of a tensor whose TP-sharded local shape is ``local`` (no expert dim)."""
        t = self.moe_tp_size
        local = tuple(local)
        if t == 1 or shard_id == "w2_bias":
            return local
        if shard_id in ("w13", "w1", "w3"):  # [2I, H] / [I, H]: rows
            return (local[0] * t, *local[1:])
        if shard_id == "w13_bias":
            return (local[0] * t,)
        return (*local[:-1], local[-1] * t)  # w2 [H, I]: columns

    def _tp_slice(self, t: torch.Tensor, shard_id: str) -> torch.Tensor:
        """This rank's intermediate slice of a full expert tensor (``[..., 2I, H]`` gate rows then up rows, ``[..., I,
        H]``, ``[..., H, I]``, ``[..., 2I]``); the down bias is added by one rank of the expert's group only."""
        return dist.expert_slice(t, shard_id, self.moe_tp_rank, self.moe_tp_size)

    def _load_shared(self, param: nn.Parameter, loaded: torch.Tensor, shard_id: str) -> None:
        """A shared expert MLP of width ``S * I`` -> S slots of width I (the gated activation is elementwise, so the
        S slot outputs sum to the MLP's output)."""
        I, S, L = self.intermediate_size, self.num_shared_experts, self.num_local_experts
        F, r = self.full_intermediate_size, self.moe_tp_rank  # TP-sharded experts: slice r of each slot's width
        H = param.shape[1]  # w2 is [L + S, H, I]
        if shard_id in ("shared_w1", "shared_w3"):
            want = (S * F, param.shape[2])
            rows = slice(0, I) if shard_id == "shared_w1" else slice(I, 2 * I)
            if tuple(loaded.shape) != want:
                raise ValueError(f"shared experts ({shard_id}): checkpoint tensor has shape {tuple(loaded.shape)}, expected {want}")
            param.data[L:, rows].copy_(loaded.view(S, F, -1).narrow(1, r * I, I))
        else:
            want = (H, S * F)
            if tuple(loaded.shape) != want:
                raise ValueError(f"shared experts ({shard_id}): checkpoint tensor has shape {tuple(loaded.shape)}, expected {want}")
            param.data[L:].copy_(loaded.view(H, S, F).permute(1, 0, 2).narrow(2, r * I, I))

    def load_stacked(self, param: nn.Parameter, stacked: dict[str, torch.Tensor]) -> None:
        """One copy per fused parameter from staged per-expert tensors ({"w1": [L, I, H], "w3": ...} or {"w2": ...})."""
        if "w1" in stacked and not self.gated:  # the up projection alone
            full = self._tp_slice(stacked["w1"], "w1")
        elif "w1" in stacked:
            full = torch.cat([self._tp_slice(stacked["w1"], "w1"), self._tp_slice(stacked["w3"], "w3")], dim=1)
        else:
            full = self._tp_slice(stacked["w2"], "w2")
        target = param.data[: self.num_local_experts]
        if tuple(full.shape) != tuple(target.shape):
            raise ValueError(f"stacked experts have shape {tuple(full.shape)}, expected {tuple(target.shape)}")
        target.copy_(full)

    def _with_shared_slots(self, topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Local ids (other ranks' experts -> a sentinel past every slot) plus the shared slots at weight 1."""
        L, S = self.num_local_experts, self.num_shared_experts
        local = topk_ids - self.expert_offset
        local = torch.where((local >= 0) & (local < L), local, torch.full_like(local, L + S))
        if not self.shared_active:
            return topk_weights, local
        T = topk_ids.shape[0]
        shared_ids = torch.arange(L, L + S, device=topk_ids.device).expand(T, S)
        shared_w = torch.ones(T, S, dtype=topk_weights.dtype, device=topk_weights.device)
        return torch.cat([topk_weights, shared_w], dim=1), torch.cat([local, shared_ids], dim=1)

    def sequence_parallel_gathers_tokens(self) -> bool:
        return True  # tokens, their routing weights and ids all token-major; forward() all-reduces the experts' sums

    def forward(self, hidden_states: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
        if self.quant_method is not None:
            if self.weight_on_input or not self.gated:
                raise NotImplementedError("FusedMoE: quantized experts with the routing weight on the input "
                                          "(weight_on_input, Llama 4) or non-gated experts are not implemented")
            out = self.quant_method.apply(self, hidden_states, topk_weights, topk_ids)
            return dist.all_reduce(out) if self.expert_parallel else out
        # GPT-OSS's bf16 experts (biases, clamped SwiGLU) take the kernels too: the torch reference under a CUDA graph
        # would run every expert (fused_moe_static).
        # The Triton kernels weight the experts' outputs and split w13 into gate and up: the routing weight on the
        # input (Llama 4) and non-gated experts (Nemotron-H) take the torch path below (fused_moe / fused_moe_static
        # with weight_on_input / gated=False), never the kernels.
        if self.backend != "aiter" and gpu.enabled(hidden_states) and not self.weight_on_input and self.gated:
            from . import kernels as gpu_moe

            if gpu_moe.supported(hidden_states, self.w13_weight, self.activation):
                # Global ids in, this rank's experts [offset, offset + L) and (rank 0) the shared slots computed.
                out = gpu_moe.fused_moe(
                    hidden_states, self.w13_weight, self.w2_weight, topk_weights, topk_ids, self.activation,
                    expert_offset=self.expert_offset, num_local_experts=self.num_local_experts,
                    num_shared=self.num_shared_experts if self.shared_active else 0,
                    w13_bias=self.w13_bias, w2_bias=self.w2_bias, **(self.activation_params or {}),
                )
                return dist.all_reduce(out) if self.expert_parallel else out
        if self.num_shared_experts:
            topk_weights, topk_ids = self._with_shared_slots(topk_weights, topk_ids)
            offset, num_local = 0, self.num_local_experts + self.num_shared_experts
        else:
            offset, num_local = self.expert_offset, self.num_local_experts
        if hidden_states.is_cuda and torch.cuda.is_current_stream_capturing():
            # Inside a CUDA-graph capture (decode steps): the sorted path's one host sync (expert counts) is not
            # allowed, so every local expert runs on the (few) decode tokens with a dense combine instead.
            out = fused_moe_static(
                hidden_states, self.w13_weight, self.w2_weight, topk_weights, topk_ids, self.act,
                expert_offset=offset, num_local_experts=num_local, w13_bias=self.w13_bias, w2_bias=self.w2_bias,
                weight_on_input=self.weight_on_input, gated=self.gated,
            )
            return dist.all_reduce(out) if self.expert_parallel else out
        out = fused_moe(
            hidden_states, self.w13_weight, self.w2_weight, topk_weights, topk_ids,
            self.activation if self.activation_params is None and self.gated else self.act,  # aiter takes silu by name
            expert_offset=offset,
            num_local_experts=num_local if (self.expert_parallel or self.num_shared_experts) else None,
            # Sum the k weighted expert outputs per token, then round once: the numerics of HF's default
            # experts_implementation="grouped_mm" (the eager loop's per-expert bf16 index_add differs by ~1 ulp).
            accumulate="sum",
            backend=self.backend,
            global_num_experts=num_local if self.num_shared_experts else self.num_experts,
            w13_bias=self.w13_bias, w2_bias=self.w2_bias, weight_on_input=self.weight_on_input, gated=self.gated,
        )
        return dist.all_reduce(out) if self.expert_parallel else out
