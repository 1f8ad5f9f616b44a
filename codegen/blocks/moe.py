"""moe: routed experts behind a top-k router (HF ``*SparseMoeBlock`` / ``*TopKRouter``), optional shared experts.

Softmax routers (Mixtral, Qwen3-MoE), sigmoid grouped routers with a selection bias (GLM4-MoE, DeepSeek-V3) and
GPT-OSS's biased router (top-k over the logits, softmax over the selected) with biased experts and a clamped SwiGLU,
Llama 4's router (top-k over the logits, sigmoid of the selected) whose weight scales the expert input
(``weight_on_input``), DBRX's p-norm renormalisation (``renormalize_p``) and Nemotron-H's non-gated ReLU^2 experts
(``gated: false``) with a non-gated shared expert.
The experts' checkpoint names are data of ``checkpoint.experts`` (codegen/schema.py), both per-expert and fused
layouts; ``expert_layout`` says how the fused tensors are laid out (GPT-OSS transposes and interleaves gate/up).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Literal

from pydantic import Field

from ..ir import Module, Value
from ..spec_types import Expression, Identifier, Strict
from ._kind import Kind, LoweringContext
from .gated import GatedMLP
from .ungated import UngatedMLP


class RouterSpec(Strict):
    """Top-k expert selection: scores, optional grouped top-k and bias, renormalisation."""

    name: Identifier = Field(default="gate", description="module / checkpoint name of the router linear")
    scoring: Literal["softmax", "sigmoid", "topk_softmax", "topk_sigmoid"] = Field(
        description="softmax: Mixtral/Qwen3-MoE (softmax over all experts, then top-k); sigmoid: GLM4-MoE/DeepSeek-V3; "
        "topk_softmax: GPT-OSS (top-k over the logits, then softmax over the k selected); topk_sigmoid: Llama 4 "
        "(top-k over the logits, each selected one's weight its own sigmoid, never renormalised)"
    )
    bias: bool = Field(default=False, description="the router linear has a bias `<name>.bias` (GPT-OSS)")
    top_k: Expression = Field(description="experts per token, usually num_experts_per_tok")
    renormalize: Expression = Field(default=False, description="divide the top-k weights by their sum (norm_topk_prob)")
    renormalize_p: Expression = Field(
        default=1.0, description="with renormalize: divide the top-k weights by their p-norm, (sum |w|^p)^(1/p), "
        "instead of their sum (DBRX moe_normalize_expert_weights); 1 is the sum",
    )
    n_group: Expression | None = Field(default=None, description="grouped top-k: number of expert groups")
    topk_group: Expression | None = Field(default=None, description="grouped top-k: groups kept per token")
    group_score: Literal["top2_sum", "max"] = Field(
        default="top2_sum",
        description="grouped top-k: how a group is ranked; top2_sum = the sum of its two best selection scores "
        "(DeepSeek-V3 / GLM4-MoE noaux_tc), max = its best score (DeepSeek-V2 topk_method group_limited_greedy)",
    )
    correction_bias: bool = Field(default=False, description="e_score_correction_bias: added for selection only")
    routed_scaling_factor: Expression = Field(
        default=1.0, description="multiplies the routed experts' weights (routed_scaling_factor, DeepSeek-V3 2.5)",
    )
    float32: bool = Field(default=False, description="router weight and math kept in float32 (GLM4-MoE)")
    weights_in_model_dtype: bool = Field(
        default=False, description="top-k weights cast to the model dtype before combining (Qwen3-MoE)"
    )


class SharedExpertsSpec(Strict):
    name: Identifier = Field(
        default="shared_experts", description="module / checkpoint name of the shared expert MLP (shared_expert in "
        "Qwen2-MoE)",
    )
    count: Expression = Field(default=1, description="number of shared experts (n_shared_experts)")
    intermediate_size: Expression = Field(description="total width of the shared expert MLP (count x expert width)")
    fuse: bool = Field(
        default=False,
        description="run them as `count` extra expert slots of the fused MoE op (weight 1) where the target's MoE op "
        "allows it (rocm, as ATOM's shared-expert fusion); otherwise a separate gated MLP",
    )
    bias: Expression = Field(
        default=False, description="the shared expert MLP's projections have biases (Nemotron-H mlp_bias; non-gated "
        "MoE only)",
    )
    gate: Identifier | None = Field(
        default=None,
        description="module name of a linear [1, hidden] whose sigmoid scales the shared expert's output per token "
        "(Qwen3-Next / Qwen3.5-MoE shared_expert_gate); absent: the output is added as is",
    )


class ClampedSwiGLUSpec(Strict):
    """GPT-OSS's expert activation (GptOssExperts._apply_gate): gate clamped to max `limit`, up to [-limit, limit],
    ``(up + 1) * gate * sigmoid(alpha * gate)``."""

    kind: Literal["clamped_swiglu"] = Field(
        description="clamped_swiglu: GPT-OSS's (up + 1) * gate * sigmoid(alpha * gate), both clamped to limit",
    )
    alpha: Expression = Field(description="sigmoid sharpness (swiglu_alpha, 1.702)")
    limit: Expression = Field(description="clamp bound (swiglu_limit, 7.0)")


class MoESpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. mlp")
    kind: Literal["moe"] = Field(description="moe: routed experts (+ optional shared experts), fused MoE op")
    num_experts: Expression = Field(description="routed experts: num_experts / num_local_experts / n_routed_experts")
    intermediate_size: Expression = Field(description="per-expert intermediate width (moe_intermediate_size)")
    activation: Literal["silu", "relu2"] | ClampedSwiGLUSpec = Field(
        description="silu (SwiGLU), or {kind: clamped_swiglu, alpha, limit} (GPT-OSS); relu2 (squared ReLU) for "
        "non-gated experts (gated: false, Nemotron-H)"
    )
    gated: bool = Field(
        default=True,
        description="false: non-gated experts down(act(up(x))) with an up and a down projection only (Nemotron-H "
        "NemotronHExperts; checkpoint.experts names up and down, no gate); the shared experts are then non-gated "
        "MLPs of the same activation",
    )
    expert_bias: bool = Field(
        default=False,
        description="experts carry gate-up [E, 2I] and down [E, H] biases, loaded from `<fused name>_bias` (GPT-OSS)",
    )
    weight_on_input: bool = Field(
        default=False,
        description="the routing weight multiplies each selected expert's INPUT, and the experts' outputs are summed "
        "unweighted (Llama 4: routed_in = x * score); default: it multiplies the expert's output",
    )
    expert_layout: Literal["stacked", "interleaved_transposed", "flat", "transposed"] = Field(
        default="stacked",
        description="layout of checkpoint.experts.fused tensors: stacked = transformers v5 MoE ([E, 2I, H] gate rows "
        "then up rows, [E, H, I]); interleaved_transposed = GPT-OSS ([E, H, 2I] with gate/up interleaved on the last "
        "dim, [E, I, H]); flat = DBRX (fused gate, up and down names, each [E * I, H]: expert e's rows e*I..(e+1)*I, "
        "down stored transposed, down = x @ w2_e)",
    )
    router: RouterSpec = Field(
        description="the router: name, scoring, top_k, renormalize, grouped top-k, correction bias",
    )
    shared_experts: SharedExpertsSpec | None = Field(
        default=None, description="experts every token uses, e.g. {count: n_shared_experts, intermediate_size: "
        "moe_intermediate_size * n_shared_experts}",
    )
    experts_name: Identifier = Field(
        default="experts", description="module name of the routed experts in the checkpoint (mlp.experts.{e}...)",
    )


@dataclass(frozen=True)
class Router:
    name: str
    scoring: str
    top_k: Value
    renormalize: Value
    n_group: Value | None  # None: plain top-k
    topk_group: Value | None
    correction_bias: bool
    routed_scaling_factor: Value | None  # None: literally 1
    float32: bool
    weights_in_model_dtype: bool
    bias: bool = False
    group_score: str = "top2_sum"  # how groups are ranked (grouped top-k only)
    renormalize_p: Value | None = None  # None: the sum (p = 1); else the p of the p-norm the weights are divided by


@dataclass(frozen=True)
class SharedExperts:
    count: Value
    fuse: bool  # extra slots of the fused MoE op where the target allows it (rocm)
    mlp: GatedMLP  # the separate MLP otherwise (its name is the module name); an UngatedMLP for non-gated experts
    gate: str | None = None  # sigmoid(gate(x)) scales the MLP's output (never fused: the weight is per token)


@dataclass(frozen=True, kw_only=True)
class MoE(Module):
    kind = "moe"
    slot = "mlp"
    class_suffix = "SparseMoeBlock"
    single_class = True  # the checkpoint's expert names are model-level data: one MoE class per model
    uses_expert_names = True

    num_experts: Value
    intermediate_size: Value
    activation: str
    router: Router
    shared: SharedExperts | None
    experts_name: str
    activation_params: tuple[tuple[str, Value], ...] = ()  # (name, value) of a parametric activation
    expert_bias: bool = False
    expert_layout: str = "stacked"
    weight_on_input: bool = False  # the routing weight scales the expert's input (Llama 4), not its output
    gated: bool = True  # False: non-gated experts down(act(up(x))) (Nemotron-H)

    def activation_params_py(self) -> str:
        """The parameters as a Python dict literal over config values (``{"alpha": ..., "limit": ...}``)."""
        return "{" + ", ".join(f"\"{k}\": {v.py}" for k, v in self.activation_params) + "}"

    def dependencies(self) -> tuple[Module, ...]:
        return (self.shared.mlp,) if self.shared else ()

    def named(self, class_name: Callable[[Module], str]) -> Module:
        shared = self.shared and replace(self.shared, mlp=self.shared.mlp.named(class_name))
        return replace(self, class_name=class_name(self), shared=shared)

    def readme_rows(self, target: str) -> list[tuple[str, str]]:
        r = self.router
        text = f"`{self.num_experts.spec}` experts, top-`{r.top_k.spec}`, {r.scoring} scoring"
        if r.n_group is not None and r.topk_group is not None:
            ranked = "their best score" if r.group_score == "max" else "the sum of their two best scores"
            text += f", grouped top-k (`{r.n_group.spec}` groups ranked by {ranked}, keep `{r.topk_group.spec}`)"
        if r.correction_bias:
            text += ", e_score_correction_bias"
        if r.scoring not in ("topk_softmax", "topk_sigmoid"):
            text += f", renormalise `{r.renormalize.spec}`"
        if r.renormalize_p is not None:
            text += f" by the `{r.renormalize_p.spec}`-norm"
        if r.bias:
            text += ", router bias"
        if r.routed_scaling_factor is not None:
            text += f", scaling `{r.routed_scaling_factor.spec}`"
        if self.shared:
            fused = "; fused as extra expert slots" if self.shared.fuse and target == "rocm" else ""
            width = self.shared.mlp.intermediate_size.spec
            gated = f", scaled by sigmoid(`{self.shared.gate}`(x))" if self.shared.gate else ""
            text += f", `{self.shared.count.spec}` shared experts (width `{width}`{fused}{gated})"
        rows = [("intermediate_size", f"`{self.intermediate_size.spec}` per expert"), ("MoE", text)]
        if self.activation_params:
            params = ", ".join(f"{k} `{v.spec}`" for k, v in self.activation_params)
            rows.append(("expert activation", f"{self.activation} ({params})"))
        if self.expert_bias:
            rows.append(("expert biases", "gate-up and down biases per expert"))
        if self.expert_layout != "stacked":
            rows.append(("fused expert layout", self.expert_layout))
        if self.weight_on_input:
            rows.append(("routing weight", "multiplies each selected expert's input (not its output)"))
        if not self.gated:
            rows.append(("experts", f"not gated: down({self.activation}(up(x)))"))
        return rows


def lower(ctx: LoweringContext, p: tuple[Any, ...], m: MoESpec) -> MoE:
    r, rp = m.router, p + ("router",)
    if (r.n_group is None) != (r.topk_group is None):
        ctx.error(rp, "grouped top-k needs both n_group and topk_group")
    if r.group_score != "top2_sum" and r.n_group is None:
        ctx.error(rp + ("group_score",), "group_score ranks expert groups: it needs n_group and topk_group")
    if r.scoring in ("topk_softmax", "topk_sigmoid") and r.n_group is not None:
        ctx.error(rp + ("n_group",), f"grouped top-k is not defined for scoring {r.scoring}")
    scaling = ctx.value(rp + ("routed_scaling_factor",), r.routed_scaling_factor)
    norm_p = ctx.value(rp + ("renormalize_p",), r.renormalize_p)
    if not norm_p.is_literal(1) and r.scoring != "softmax":
        ctx.error(rp + ("renormalize_p",), "a p-norm renormalisation is generated for scoring softmax only (DBRX)")
    router = Router(
        name=r.name, scoring=r.scoring, top_k=ctx.value(rp + ("top_k",), r.top_k),
        renormalize=ctx.value(rp + ("renormalize",), r.renormalize),
        n_group=ctx.optional(rp + ("n_group",), r.n_group), topk_group=ctx.optional(rp + ("topk_group",), r.topk_group),
        correction_bias=r.correction_bias, routed_scaling_factor=None if scaling.is_literal(1) else scaling,
        float32=r.float32, weights_in_model_dtype=r.weights_in_model_dtype, bias=r.bias, group_score=r.group_score,
        renormalize_p=None if norm_p.is_literal(1) else norm_p,
    )
    if isinstance(m.activation, ClampedSwiGLUSpec):
        ap = p + ("activation",)
        activation = m.activation.kind
        params = (("alpha", ctx.value(ap + ("alpha",), m.activation.alpha)),
                  ("limit", ctx.value(ap + ("limit",), m.activation.limit)))
        if m.shared_experts is not None:
            ctx.error(ap, "shared experts are gated MLPs (silu); a clamped_swiglu MoE cannot have them")
    else:
        activation, params = m.activation, ()
    if m.gated != (activation != "relu2"):
        ctx.error(p + ("activation",), "non-gated experts (gated: false) take relu2, gated ones silu or clamped_swiglu")
    if not m.gated and (m.expert_bias or m.expert_layout != "stacked"):
        ctx.error(p + ("gated",), "non-gated experts are generated without expert biases, in the stacked layout")
    shared = None
    if m.shared_experts is not None:
        se, sp = m.shared_experts, p + ("shared_experts",)
        if m.gated and se.bias != False:  # noqa: E712 - a literal False (the default) or an expression
            ctx.error(sp + ("bias",), "shared expert biases are generated for non-gated experts only")
        if not m.gated and se.fuse:
            ctx.error(sp + ("fuse",), "non-gated shared experts cannot ride in the fused MoE op")
        cls = GatedMLP if m.gated else UngatedMLP
        mlp = cls(name=se.name, activation=activation, bias=ctx.value(sp + ("bias",), se.bias),
                  intermediate_size=ctx.value(sp + ("intermediate_size",), se.intermediate_size))
        if se.gate is not None and se.fuse:
            ctx.error(sp + ("fuse",), "a gated shared expert cannot ride in the fused MoE op (its weight is "
                                      "sigmoid(gate(x)) per token, not 1); drop `fuse` or `gate`")
        shared = SharedExperts(count=ctx.value(sp + ("count",), se.count), fuse=se.fuse, mlp=mlp, gate=se.gate)
    return MoE(
        name=m.name, num_experts=ctx.value(p + ("num_experts",), m.num_experts),
        intermediate_size=ctx.value(p + ("intermediate_size",), m.intermediate_size), activation=activation,
        router=router, shared=shared, experts_name=m.experts_name, activation_params=params,
        expert_bias=m.expert_bias, expert_layout=m.expert_layout, weight_on_input=m.weight_on_input, gated=m.gated,
    )


KIND = Kind(name="moe", spec=MoESpec, ir=MoE, lower=lower)
