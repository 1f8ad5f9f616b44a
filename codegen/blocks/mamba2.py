"""mamba2: the Mamba-2 (SSD) mixer (transformers ``Mamba2Mixer``, ``BambaMixer``, ``NemotronHMamba2Mixer``):
``in_proj`` to ``[z | xBC | dt]``, a depthwise causal conv1d (+ bias) and activation over xBC, split into x, B, C
(``n_groups`` groups of B / C), the selective scan with ``A = -exp(A_log)``, ``dt = softplus(dt + dt_bias)`` clamped
to ``time_step_limit`` and the ``D`` skip, a gated RMSNorm grouped per ``n_groups`` (``y * silu(z)``, then the norm:
``norm_before_gate`` false), then ``out_proj``. Falcon-H1's ``FalconH1Mixer`` adds factors on in_proj's output parts
(``in_proj_scales``), its own out_proj bias flag (``out_bias``), the norm before the gate or no norm at all.

Its cache is one state slot per request (``recurrent_state``: the conv inputs ``[I + 2*G*N, K-1]`` and the SSM state
``[H, P, N]``), declared by the generated class's ``kv_spec()`` and managed by the engine's state pool
(runtime/state_cache.py). The runtime layer is runtime/layers/mamba2/layer.py (rocm), the static mixer of
runtime/layers/mamba2/ops.py (neuron) and vLLM's ``MambaMixer2`` through runtime/layers/mamba2/vllm.py (vllm).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ..ir import Const, Module, Value
from ..spec_types import Expression, Identifier, Strict
from ._kind import Kind, LoweringContext


class Mamba2StateSpec(Strict):
    kind: Literal["recurrent_state"] = Field(
        description="recurrent_state: one slot per request holding the conv inputs [I + 2*G*N, K-1] and the SSM state "
        "[H, P, N]"
    )


class Mamba2Spec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. mixer")
    kind: Literal["mamba2"] = Field(description="mamba2: the Mamba-2 SSD mixer (transformers Mamba2Mixer / BambaMixer)")
    num_heads: Expression = Field(description="SSM heads H (num_heads, mamba_n_heads)")
    head_dim: Expression = Field(description="channels per head P (head_dim, mamba_d_head); H * P is the inner width I")
    state_size: Expression = Field(description="SSM state size N (state_size, mamba_d_state, ssm_state_size)")
    n_groups: Expression = Field(description="groups of B and C (n_groups); head h reads group h // (H / G)")
    conv_kernel: Expression = Field(description="width K of the depthwise causal conv1d (conv_kernel, mamba_d_conv)")
    chunk_size: Expression = Field(description="positions per chunk of the prefill scan (chunk_size)")
    time_step_limit: Expression = Field(
        default="[0.0, float('inf')]", description="(min, max) dt is clamped to after softplus (time_step_limit)"
    )
    bias: Expression = Field(default=False, description="in_proj and out_proj have biases (use_bias, mamba_proj_bias)")
    conv_bias: Expression = Field(default=True, description="the conv1d has a bias (use_conv_bias, mamba_conv_bias)")
    activation: Expression = Field(default="'silu'", description="the conv output's activation (hidden_act): silu")
    norm_eps: Expression = Field(description="epsilon of the gated RMSNorm (layer_norm_epsilon, rms_norm_eps)")
    intermediate_size: Expression | None = Field(
        default=None, description="the inner width the config states (expand * hidden_size); checked against "
        "num_heads * head_dim when the model is built",
    )
    in_proj_scales: Expression | None = Field(
        default=None, description="five factors on in_proj's output parts [z, x, B, C, dt] (Falcon-H1 "
        "ssm_multipliers, its mup_vector), applied to the projection's output at run time; absent: none",
    )
    out_bias: Expression | None = Field(
        default=None, description="out_proj has a bias (Falcon-H1 projectors_bias); absent: the same as bias",
    )
    gated_norm: Expression = Field(
        default=True, description="the gated RMSNorm runs (Falcon-H1 mamba_rms_norm); false: y * silu(z), no norm "
        "weight",
    )
    norm_before_gate: Expression = Field(
        default=False, description="true: RMSNorm(y) * silu(z) (Falcon-H1 mamba_norm_before_gate); false: "
        "RMSNorm(y * silu(z)) (Mamba2, Bamba)",
    )
    state_cache: Mamba2StateSpec = Field(
        description="the per-request state this layer declares, e.g. {kind: recurrent_state}",
    )


@dataclass(frozen=True, kw_only=True)
class Mamba2(Module):
    kind = "mamba2"
    slot = "attention"
    class_suffix = "Mixer"

    num_heads: Value
    head_dim: Value
    state_size: Value
    n_groups: Value
    conv_kernel: Value
    chunk_size: Value
    time_step_limit: Value
    bias: Value
    conv_bias: Value
    activation: Value
    norm_eps: Value
    intermediate_size: Value | None
    state_cache: str
    in_proj_scales: Value | None = None
    out_bias: Value | None = None
    gated_norm: Value = Const(True)
    norm_before_gate: Value = Const(False)

    @property
    def out_proj_bias(self) -> Value:
        """out_proj's bias flag: ``out_bias``, else in_proj's ``bias``."""
        return self.bias if self.out_bias is None else self.out_bias

    def readme_rows(self, target: str) -> list[tuple[str, str]]:
        return [
            ("mamba2 mixer", f"in_proj -> [z, xBC, dt]; act(depthwise causal conv1d(xBC), kernel "
                             f"`{self.conv_kernel.spec}`, bias `{self.conv_bias.spec}`) -> x, B, C "
                             f"(`{self.n_groups.spec}` groups); SSD scan over `{self.num_heads.spec}` heads of "
                             f"`{self.head_dim.spec}`, state `{self.state_size.spec}`, dt clamped to "
                             f"`{self.time_step_limit.spec}`; {self._norm_row()}; out_proj "
                             f"(bias `{self.out_proj_bias.spec}`)"),
            ("state cache", f"{self.state_cache}: one slot per request, the conv inputs and the SSM state `[H, P, N]`"),
        ] + ([("mamba2 in_proj scales", f"[z, x, B, C, dt] parts times `{self.in_proj_scales.spec}`")]
             if self.in_proj_scales is not None else [])

    def _norm_row(self) -> str:
        if self.gated_norm.always and self.norm_before_gate.never:
            return "gated grouped RMSNorm"
        return (f"gated grouped RMSNorm when `{self.gated_norm.spec}` (else y * silu(z)), normed before the gate "
                f"when `{self.norm_before_gate.spec}`")


def lower(ctx: LoweringContext, p: tuple[Any, ...], a: Mamba2Spec) -> Mamba2:
    return Mamba2(
        name=a.name,
        num_heads=ctx.value(p + ("num_heads",), a.num_heads),
        head_dim=ctx.value(p + ("head_dim",), a.head_dim),
        state_size=ctx.value(p + ("state_size",), a.state_size),
        n_groups=ctx.value(p + ("n_groups",), a.n_groups),
        conv_kernel=ctx.value(p + ("conv_kernel",), a.conv_kernel),
        chunk_size=ctx.value(p + ("chunk_size",), a.chunk_size),
        time_step_limit=ctx.value(p + ("time_step_limit",), a.time_step_limit),
        bias=ctx.value(p + ("bias",), a.bias),
        conv_bias=ctx.value(p + ("conv_bias",), a.conv_bias),
        activation=ctx.value(p + ("activation",), a.activation),
        norm_eps=ctx.value(p + ("norm_eps",), a.norm_eps),
        intermediate_size=ctx.optional(p + ("intermediate_size",), a.intermediate_size),
        state_cache=a.state_cache.kind,
        in_proj_scales=ctx.optional(p + ("in_proj_scales",), a.in_proj_scales),
        out_bias=ctx.optional(p + ("out_bias",), a.out_bias),
        gated_norm=ctx.value(p + ("gated_norm",), a.gated_norm),
        norm_before_gate=ctx.value(p + ("norm_before_gate",), a.norm_before_gate),
    )


KIND = Kind(name="mamba2", spec=Mamba2Spec, ir=Mamba2, lower=lower)
