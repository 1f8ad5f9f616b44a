"""mamba: the Mamba-1 selective-state-space token mixer (HF ``MambaMixer``; ``JambaMambaMixer`` with ``norm_eps``):
``in_proj`` to ``[x | z]``, a depthwise causal conv1d + SiLU over x, ``x_proj`` to ``[dt | B | C]`` (Jamba: an
RMSNorm on each), ``dt_proj`` + softplus, the selective scan with ``A = -exp(A_log)`` and the ``D`` skip, gated by
``silu(z)``, then ``out_proj``.

Its cache is one state slot per request (``recurrent_state``: the conv history ``[intermediate, K-1]`` and the SSM
state ``[intermediate, d_state]``), declared by the generated class's ``kv_spec()`` and managed by the engine's state
pool (runtime/state_cache.py). The runtime layer is runtime/layers/mamba/layer.py (rocm), the static ops of
runtime/layers/mamba/ops.py (neuron) and vLLM's own ``MambaMixer`` (runtime/layers/mamba/vllm.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ..ir import Module, Value
from ..spec_types import Expression, Identifier, Strict
from ._kind import Kind, LoweringContext


class MambaStateSpec(Strict):
    kind: Literal["recurrent_state"] = Field(
        description="recurrent_state: one slot per request, conv state [intermediate, K-1] + SSM state "
        "[intermediate, d_state] (float32)"
    )


class MambaSpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. mamba (Jamba) or mixer (Mamba)")
    kind: Literal["mamba"] = Field(description="mamba: Mamba-1 selective-state-space mixer (HF MambaMixer)")
    intermediate_size: Expression = Field(description="channels of x and z: expand * hidden_size")
    state_size: Expression = Field(description="d_state: SSM state width per channel (mamba_d_state, state_size)")
    conv_kernel: Expression = Field(description="width of the depthwise causal conv1d (mamba_d_conv, conv_kernel)")
    time_step_rank: Expression = Field(description="rank of the dt projection (mamba_dt_rank, time_step_rank)")
    conv_bias: Expression = Field(default=False, description="conv1d has a bias (mamba_conv_bias, use_conv_bias)")
    proj_bias: Expression = Field(
        default=False, description="in_proj and out_proj have biases (mamba_proj_bias, use_bias)"
    )
    norm_eps: Expression | None = Field(
        default=None,
        description="eps of Jamba's RMSNorms on dt, B and C (dt_layernorm, b_layernorm, c_layernorm); absent: no "
        "norms (MambaMixer)",
    )
    state_cache: MambaStateSpec = Field(
        description="the per-request state this layer declares, e.g. {kind: recurrent_state}",
    )


@dataclass(frozen=True, kw_only=True)
class Mamba(Module):
    kind = "mamba"
    slot = "attention"
    class_suffix = "MambaMixer"

    intermediate_size: Value
    state_size: Value
    conv_kernel: Value
    time_step_rank: Value
    conv_bias: Value
    proj_bias: Value
    norm_eps: Value | None
    state_cache: str

    def readme_rows(self, target: str) -> list[tuple[str, str]]:
        norms = (f"; RMSNorms on dt, B, C (eps `{self.norm_eps.spec}`)" if self.norm_eps is not None else "")
        return [
            ("mamba mixer", f"in_proj -> [x, z] (`{self.intermediate_size.spec}` channels each, bias "
                            f"`{self.proj_bias.spec}`); x_proj -> [dt (rank `{self.time_step_rank.spec}`), B, C] "
                            f"(d_state `{self.state_size.spec}`){norms}; dt_proj + softplus; selective scan, "
                            "A = -exp(A_log), D skip; y * silu(z); out_proj"),
            ("conv1d", f"depthwise causal, kernel `{self.conv_kernel.spec}`, bias `{self.conv_bias.spec}`, SiLU"),
            ("state cache", f"{self.state_cache}: one slot per request, conv `[intermediate, K-1]` + SSM "
                            "`[intermediate, d_state]` (float32)"),
        ]


def lower(ctx: LoweringContext, p: tuple[Any, ...], a: MambaSpec) -> Mamba:
    return Mamba(
        name=a.name,
        intermediate_size=ctx.value(p + ("intermediate_size",), a.intermediate_size),
        state_size=ctx.value(p + ("state_size",), a.state_size),
        conv_kernel=ctx.value(p + ("conv_kernel",), a.conv_kernel),
        time_step_rank=ctx.value(p + ("time_step_rank",), a.time_step_rank),
        conv_bias=ctx.value(p + ("conv_bias",), a.conv_bias),
        proj_bias=ctx.value(p + ("proj_bias",), a.proj_bias),
        norm_eps=ctx.optional(p + ("norm_eps",), a.norm_eps),
        state_cache=a.state_cache.kind,
    )


KIND = Kind(name="mamba", spec=MambaSpec, ir=Mamba, lower=lower)
