"""gated: the SwiGLU-style MLP ``down(act(gate(x)) * up(x))`` (LlamaMLP). Its class takes the intermediate width at
construction, so dense layers of different widths and MoE shared experts share one class."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import Field

from ..ir import Module, Value
from ..spec_types import Expression, Identifier, Strict
from ._kind import Kind, LoweringContext

ACTIVATION_CLASSES = {"silu": "SiluAndMul", "gelu_tanh": "GeluTanhAndMul"}  # runtime/layers/activation.py


class GatedSpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. mlp")
    kind: Literal["gated"] = Field(description="gated: down(act(gate(x)) * up(x)) (SwiGLU)")
    activation: Literal["silu", "gelu_tanh"] = Field(
        description="hidden_act: silu (SwiGLU) or gelu_tanh (gelu_pytorch_tanh, GeGLU)",
    )
    intermediate_size: Expression = Field(description="hidden width of the MLP, usually intermediate_size")
    bias: Expression = Field(default=False, description="gate/up/down projections have a bias, e.g. mlp_bias")
    gate_multiplier: Expression | None = Field(
        default=None, description="gate_proj's output times this before the activation: down(act(gate(x) * m) * "
        "up(x)) (Falcon-H1 mlp_multipliers[0]); absent: none",
    )


@dataclass(frozen=True, kw_only=True)
class GatedMLP(Module):
    kind = "gated"
    slot = "mlp"
    class_suffix = "MLP"
    fused_params = {"gate_up_proj": frozenset({0, 1})}
    output_reduce_deferrable = True  # down_proj

    activation: str
    intermediate_size: Value  # a constructor argument, not part of the class
    bias: Value
    gate_multiplier: Value | None = None  # Falcon-H1: act(gate(x) * m)

    @property
    def activation_class(self) -> str:
        return ACTIVATION_CLASSES[self.activation]

    def class_key(self) -> Module:
        return replace(self, class_name="", name="", intermediate_size=None)  # type: ignore[arg-type]

    def readme_rows(self, target: str) -> list[tuple[str, str]]:
        return [("intermediate_size", f"`{self.intermediate_size.spec}` (dense)"),
                ("Activation", f"{self.activation} (gated)")] + (
            [("Gate multiplier", f"act(gate_proj(x) x `{self.gate_multiplier.spec}`)")]
            if self.gate_multiplier is not None else [])


def lower(ctx: LoweringContext, p: tuple[Any, ...], m: Any, cls: type[GatedMLP] = GatedMLP) -> GatedMLP:
    """``m``: a GatedSpec, or the spec of a kind with the same fields (``cls``: its IR class, codegen/blocks/ungated.py)."""
    return cls(
        name=m.name, activation=m.activation,
        intermediate_size=ctx.value(p + ("intermediate_size",), m.intermediate_size),
        bias=ctx.value(p + ("bias",), m.bias),
        gate_multiplier=ctx.optional(p + ("gate_multiplier",), getattr(m, "gate_multiplier", None)),
    )


KIND = Kind(name="gated", spec=GatedSpec, ir=GatedMLP, lower=lower)
