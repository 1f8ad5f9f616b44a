"""gated_deltanet: the Gated DeltaNet linear-attention token mixer of Qwen3-Next / Qwen3.5 (HF
``Qwen3NextGatedDeltaNet``, ``Qwen3_5GatedDeltaNet``): q/k/v/z/b/a projections, a depthwise causal conv1d + SiLU over
q/k/v, the gated delta rule over a fixed-size per-request recurrent state, a gated RMSNorm and ``out_proj``.

Its cache is not K/V blocks but one state slot per request (``recurrent_state``: conv history ``[conv_dim, K-1]`` and
delta-rule state ``[v_heads, k_dim, v_dim]``), declared by the generated class's ``kv_spec()`` and managed by the
engine's state pool (runtime/state_cache.py). The runtime layer is runtime/layers/gated_deltanet/layer.py (rocm) and the
static mixer of runtime/layers/gated_deltanet/ops.py (neuron).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ..ir import Module, Value
from ..spec_types import Expression, Identifier, Strict
from ._kind import Kind, LoweringContext


class StateCacheSpec(Strict):
    kind: Literal["recurrent_state"] = Field(
        description="recurrent_state: one slot per request, conv state [conv_dim, K-1] + delta-rule state [Hv, Dk, Dv]"
    )


class GatedDeltaNetSpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. linear_attn")
    kind: Literal["gated_deltanet"] = Field(description="gated_deltanet: Gated DeltaNet linear attention (Qwen3-Next)")
    layout: Literal["qwen3_next", "qwen3_5"] = Field(
        description="qwen3_next: fused in_proj_qkvz / in_proj_ba interleaved per key head; qwen3_5: split "
        "in_proj_qkv / in_proj_z / in_proj_b / in_proj_a (fuse them with checkpoint.fuse)"
    )
    num_key_heads: Expression = Field(description="linear_num_key_heads (q and k heads)")
    num_value_heads: Expression = Field(description="linear_num_value_heads (a multiple of the key heads)")
    key_head_dim: Expression = Field(description="linear_key_head_dim")
    value_head_dim: Expression = Field(description="linear_value_head_dim")
    conv_kernel: Expression = Field(description="linear_conv_kernel_dim: width of the depthwise causal conv1d")
    norm_eps: Expression = Field(description="eps of the gated RMSNorm over each value head")
    state_cache: StateCacheSpec = Field(
        description="the per-request state this layer declares, e.g. {kind: recurrent_state}",
    )


@dataclass(frozen=True, kw_only=True)
class GatedDeltaNet(Module):
    kind = "gated_deltanet"
    slot = "attention"
    class_suffix = "GatedDeltaNet"
    # qwen3_5's split projections load into the two GEMMs of the runtime layer by shard id
    # (runtime/layers/gated_deltanet/layer.py QWEN3_5_PACKED_MODULES); qwen3_next checkpoints are already fused.
    fused_params = {"in_proj_qkvz": frozenset({"qkv", "z"}), "in_proj_ba": frozenset({"b", "a"})}

    layout: str
    num_key_heads: Value
    num_value_heads: Value
    key_head_dim: Value
    value_head_dim: Value
    conv_kernel: Value
    norm_eps: Value
    state_cache: str

    def readme_rows(self, target: str) -> list[tuple[str, str]]:
        return [
            ("linear attention", f"Gated DeltaNet ({self.layout} projection layout), key heads "
                                 f"`{self.num_key_heads.spec}`, value heads `{self.num_value_heads.spec}`, head dims "
                                 f"`{self.key_head_dim.spec}` / `{self.value_head_dim.spec}`"),
            ("conv1d", f"depthwise causal, kernel `{self.conv_kernel.spec}`, SiLU"),
            ("state cache", f"{self.state_cache}: one slot per request, conv `[conv_dim, K-1]` + delta-rule "
                            "`[v_heads, k_dim, v_dim]` (float32)"),
        ]


def lower(ctx: LoweringContext, p: tuple[Any, ...], a: GatedDeltaNetSpec) -> GatedDeltaNet:
    return GatedDeltaNet(
        name=a.name,
        layout=a.layout,
        num_key_heads=ctx.value(p + ("num_key_heads",), a.num_key_heads),
        num_value_heads=ctx.value(p + ("num_value_heads",), a.num_value_heads),
        key_head_dim=ctx.value(p + ("key_head_dim",), a.key_head_dim),
        value_head_dim=ctx.value(p + ("value_head_dim",), a.value_head_dim),
        conv_kernel=ctx.value(p + ("conv_kernel",), a.conv_kernel),
        norm_eps=ctx.value(p + ("norm_eps",), a.norm_eps),
        state_cache=a.state_cache.kind,
    )


KIND = Kind(name="gated_deltanet", spec=GatedDeltaNetSpec, ir=GatedDeltaNet, lower=lower)
