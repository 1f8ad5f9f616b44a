"""short_conv: LFM2's gated short convolution token mixer (HF ``Lfm2ShortConv``): ``in_proj`` to ``[B | C | x]``,
a depthwise causal conv1d of ``B * x`` (kernel ``conv_L_cache``), gated by ``C``, then ``out_proj``.

Its cache is one state slot per request (``recurrent_state``: the conv history ``[hidden, K-1]``, no recurrent
part), declared by the generated class's ``kv_spec()`` and managed by the engine's state pool
(runtime/state_cache.py). The runtime layer is runtime/layers/short_conv/layer.py (rocm) and the static mixer of
runtime/layers/short_conv/ops.py (neuron).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ..ir import Module, Value
from ..spec_types import Expression, Identifier, Strict
from ._kind import Kind, LoweringContext


class ShortConvStateSpec(Strict):
    kind: Literal["recurrent_state"] = Field(
        description="recurrent_state: one slot per request holding the last K-1 conv inputs [hidden, K-1]"
    )


class ShortConvSpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. conv")
    kind: Literal["short_conv"] = Field(description="short_conv: gated depthwise causal conv (LFM2 Lfm2ShortConv)")
    conv_kernel: Expression = Field(description="conv_L_cache: width of the depthwise causal conv1d")
    bias: Expression = Field(default=False, description="conv_bias: in_proj, conv and out_proj have biases")
    state_cache: ShortConvStateSpec = Field(
        description="the per-request state this layer declares, e.g. {kind: recurrent_state}",
    )


@dataclass(frozen=True, kw_only=True)
class ShortConv(Module):
    kind = "short_conv"
    slot = "attention"
    class_suffix = "ShortConv"

    conv_kernel: Value
    bias: Value
    state_cache: str

    def readme_rows(self, target: str) -> list[tuple[str, str]]:
        return [
            ("short conv", f"in_proj -> [B, C, x]; C * depthwise causal conv1d(B * x), kernel "
                           f"`{self.conv_kernel.spec}`, bias `{self.bias.spec}`; out_proj"),
            ("state cache", f"{self.state_cache}: one slot per request, the last K-1 conv inputs `[hidden, K-1]`"),
        ]


def lower(ctx: LoweringContext, p: tuple[Any, ...], a: ShortConvSpec) -> ShortConv:
    return ShortConv(
        name=a.name,
        conv_kernel=ctx.value(p + ("conv_kernel",), a.conv_kernel),
        bias=ctx.value(p + ("bias",), a.bias),
        state_cache=a.state_cache.kind,
    )


KIND = Kind(name="short_conv", spec=ShortConvSpec, ir=ShortConv, lower=lower)
