"""ungated: the two-layer MLP ``down(act(up(x)))`` without a gate (StarCoder2MLP c_fc/c_proj, PhiMLP fc1/fc2,
GPTNeoXMLP dense_h_to_4h/dense_4h_to_h), optional biases on both projections. Its activations are transformers'
``ACT2FN`` ones that these families use: exact (erf) GELU, the tanh-approximated GELU and squared ReLU. The modules
are ``up_proj`` (column-parallel) and ``down_proj`` (row-parallel); a family's own names map onto them with
``checkpoint.rename``. Like the gated MLP, its class takes the intermediate width at construction."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import Field

from ..ir import Module, Value
from ..spec_types import Expression, Identifier, Strict
from ._kind import Kind, LoweringContext

# spec activation -> transformers ACT2FN names it is (the spec's requires: maps hidden_act onto these)
HF_ACTIVATIONS = {
    "gelu": ("gelu",),  # GELUActivation: 0.5 x (1 + erf(x / sqrt 2))
    "gelu_tanh": ("gelu_pytorch_tanh", "gelu_new", "gelu_fast"),  # the tanh approximation (equal up to rounding)
    "relu2": ("relu2",),  # ReLUSquaredActivation: relu(x) ** 2
}


class UngatedSpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. mlp")
    kind: Literal["ungated"] = Field(description="ungated: down(act(up(x))), no gate (StarCoder2, Phi-2, GPT-NeoX)")
    activation: Literal["gelu", "gelu_tanh", "relu2"] = Field(
        description="gelu: exact erf GELU (HF gelu); gelu_tanh: tanh-approximated GELU (HF gelu_pytorch_tanh, "
        "gelu_new, gelu_fast); relu2: squared ReLU (HF relu2)",
    )
    intermediate_size: Expression = Field(description="hidden width of the MLP, usually intermediate_size")
    bias: Expression = Field(default=False, description="up/down projections have a bias, e.g. use_bias")


@dataclass(frozen=True, kw_only=True)
class UngatedMLP(Module):
    kind = "ungated"
    slot = "mlp"
    class_suffix = "MLP"

    activation: str
    intermediate_size: Value  # a constructor argument, not part of the class
    bias: Value

    def class_key(self) -> Module:
        return replace(self, class_name="", name="", intermediate_size=None)  # type: ignore[arg-type]

    def readme_rows(self, target: str) -> list[tuple[str, str]]:
        return [("intermediate_size", f"`{self.intermediate_size.spec}` (dense)"),
                ("Activation", f"{self.activation} (not gated: down(act(up(x))))")]


def lower(ctx: LoweringContext, p: tuple[Any, ...], m: UngatedSpec) -> UngatedMLP:
    return UngatedMLP(
        name=m.name, activation=m.activation,
        intermediate_size=ctx.value(p + ("intermediate_size",), m.intermediate_size),
        bias=ctx.value(p + ("bias",), m.bias),
    )


KIND = Kind(name="ungated", spec=UngatedSpec, ir=UngatedMLP, lower=lower)
