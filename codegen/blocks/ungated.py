"""ungated: the two-layer MLP ``down(act(up(x)))`` without a gate (StarCoder2MLP c_fc/c_proj, PhiMLP fc1/fc2,
GPTNeoXMLP dense_h_to_4h/dense_4h_to_h), optional biases on both projections. Its activations are transformers'
``ACT2FN`` ones that these families use: exact (erf) GELU, the tanh-approximated GELU and squared ReLU. The modules
are ``up_proj`` (column-parallel) and ``down_proj`` (row-parallel); a family's own names map onto them with
``checkpoint.rename``. Like the gated MLP, its class takes the intermediate width at construction."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from ..ir import Value
from ..spec_types import Expression, Identifier, Strict
from . import gated
from ._kind import Kind, LoweringContext
from .gated import GatedMLP

# spec activation -> transformers ACT2FN names it is (the spec's requires: maps hidden_act onto these)
HF_ACTIVATIONS = {
    "gelu": ("gelu",),  # GELUActivation: 0.5 x (1 + erf(x / sqrt 2))
    "gelu_tanh": ("gelu_pytorch_tanh", "gelu_new", "gelu_fast"),  # the tanh approximation (equal up to rounding)
    "relu2": ("relu2",),  # ReLUSquaredActivation: relu(x) ** 2
}


class UngatedSpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. mlp")
    kind: Literal["ungated"] = Field(description="ungated: down(act(up(x))), no gate (StarCoder2, Phi-2, GPT-NeoX)")
    activation: Literal["gelu", "gelu_tanh", "relu2"] | None = Field(
        default=None,
        description="gelu: exact erf GELU (HF gelu); gelu_tanh: tanh-approximated GELU (HF gelu_pytorch_tanh, "
        "gelu_new, gelu_fast); relu2: squared ReLU (HF relu2); or give activation_from",
    )
    activation_from: Expression | None = Field(
        default=None,
        description="instead of activation: a config expression naming transformers' ACT2FN activation, chosen at "
        "load (GPT-NeoX hidden_act: gelu or gelu_fast); one of gelu, gelu_pytorch_tanh, gelu_new, gelu_fast, relu2 "
        "(refuse others with requires:)",
    )
    intermediate_size: Expression = Field(description="hidden width of the MLP, usually intermediate_size")
    bias: Expression = Field(default=False, description="up/down projections have a bias, e.g. use_bias")

    @model_validator(mode="after")
    def _one_activation(self) -> "UngatedSpec":
        if (self.activation is None) == (self.activation_from is None):
            raise ValueError("give exactly one of activation (a name) and activation_from (a config expression)")
        return self


@dataclass(frozen=True, kw_only=True)
class UngatedMLP(GatedMLP):
    """The gated MLP's fields (activation, intermediate_size as a constructor argument, bias) without the gate."""

    kind = "ungated"
    fused_params: ClassVar[dict[str, frozenset[Any]]] = {}  # up_proj is one checkpoint module
    output_reduce_deferrable = False  # down_proj reduces itself (the norm fusion is proven for the gated MLP only)

    activation_from: Value | None = None  # config expression naming the HF activation (activation is then "act")

    def readme_rows(self, target: str) -> list[tuple[str, str]]:
        act = self.activation if self.activation_from is None else f"`{self.activation_from.spec}` (config)"
        return [("intermediate_size", f"`{self.intermediate_size.spec}` (dense)"),
                ("Activation", f"{act} (not gated: down(act(up(x))))")]


def lower(ctx: LoweringContext, p: tuple[Any, ...], m: UngatedSpec) -> UngatedMLP:
    mlp = gated.lower(ctx, p, m, cls=UngatedMLP)
    if m.activation_from is None:
        return mlp
    return replace(mlp, activation="act", activation_from=ctx.value(p + ("activation_from",), m.activation_from))


KIND = Kind(name="ungated", spec=UngatedSpec, ir=UngatedMLP, lower=lower)
