"""lightning_attention: MiniMax's linear attention token mixer (HF ``MiniMaxLightningAttention``): ``qkv_proj`` + SiLU
to per-head ``[q | k | v]``, linear attention with a per-head exponential decay (the slope schedule of the layer's
depth), an RMSNorm over every head, a sigmoid ``output_gate`` of the layer input, then ``out_proj``.

Its cache is one state slot per request (``recurrent_state``: ``[heads, head_dim, head_dim]``, no conv part),
declared by the generated class's ``kv_spec()`` and managed by the engine's state pool (runtime/state_cache.py). The
runtime layer is runtime/layers/lightning_attention/layer.py (rocm) and the static op of
runtime/layers/lightning_attention/ops.py (neuron).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ..ir import Module, Value
from ..spec_types import Expression, Identifier, Strict
from ._kind import Kind, LoweringContext


class LightningStateSpec(Strict):
    kind: Literal["recurrent_state"] = Field(
        description="recurrent_state: one slot per request holding the linear-attention state [heads, D, D]"
    )


class LightningAttentionSpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. self_attn")
    kind: Literal["lightning_attention"] = Field(
        description="lightning_attention: MiniMax linear attention with per-head decay (MiniMaxLightningAttention)"
    )
    num_heads: Expression = Field(description="num_attention_heads (q, k and v heads alike)")
    head_dim: Expression = Field(description="head_dim: the state of each head is [head_dim, head_dim]")
    block_size: Expression = Field(description="block_size: tokens per block of the blockwise prefill")
    num_layers: Expression = Field(
        description="num_hidden_layers: the decay schedule's depth (each head's slope is scaled by 1 - i / (L - 1))"
    )
    activation: Literal["silu"] = Field(description="activation of the qkv projection (hidden_act; silu only)")
    norm_eps: Expression = Field(
        description="eps of the RMSNorm over every head's output (transformers builds it with its default, 1e-6)"
    )
    state_cache: LightningStateSpec = Field(
        description="the per-request state this layer declares, e.g. {kind: recurrent_state}",
    )


@dataclass(frozen=True, kw_only=True)
class LightningAttention(Module):
    kind = "lightning_attention"
    slot = "attention"
    class_suffix = "LightningAttention"

    num_heads: Value
    head_dim: Value
    block_size: Value
    num_layers: Value
    activation: str
    norm_eps: Value
    state_cache: str

    def readme_rows(self, target: str) -> list[tuple[str, str]]:
        return [
            ("lightning attention", f"{self.activation}(qkv_proj) -> per-head q, k, v; heads `{self.num_heads.spec}`, "
                                    f"head dim `{self.head_dim.spec}`; decay exp(-slope) per head, slopes by layer "
                                    f"depth over `{self.num_layers.spec}` layers; prefill blocks of "
                                    f"`{self.block_size.spec}`"),
            ("output", f"out_proj(sigmoid(output_gate(x)) * RMSNorm(o), eps `{self.norm_eps.spec}`)"),
            ("state cache", f"{self.state_cache}: one slot per request, `[heads, head_dim, head_dim]` (float32)"),
        ]


def lower(ctx: LoweringContext, p: tuple[Any, ...], a: LightningAttentionSpec) -> LightningAttention:
    return LightningAttention(
        name=a.name,
        num_heads=ctx.value(p + ("num_heads",), a.num_heads),
        head_dim=ctx.value(p + ("head_dim",), a.head_dim),
        block_size=ctx.value(p + ("block_size",), a.block_size),
        num_layers=ctx.value(p + ("num_layers",), a.num_layers),
        activation=a.activation,
        norm_eps=ctx.value(p + ("norm_eps",), a.norm_eps),
        state_cache=a.state_cache.kind,
    )


KIND = Kind(name="lightning_attention", spec=LightningAttentionSpec, ir=LightningAttention, lower=lower)
