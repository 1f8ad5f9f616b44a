"""shared_block: a transformer block whose weights several layers share (Zamba2's ``shared_transformer``), given in a
block's ``shared:`` slot. Each layer of that block runs it before its mixer:

  ``t = output_proj(block(input))``, ``input = concat(x, embeddings)`` (``input: concat_embeddings``, 2 * hidden wide)
  or ``x`` (``input: hidden``); ``block(u) = mlp(mlp_norm(attention(attention_norm(u))))`` (no residual inside);
  the layer's mixer then reads ``attention_norm(x + t)`` and its residual stream stays ``x`` (Zamba2HybridLayer).

``copies`` weight sets are used round-robin: the k-th layer (in depth order) whose block has the slot runs copy
``k % copies``, whose parameters keep the name of the first layer that uses it (transformers saves them there); when
``tied`` is false every using layer has its own weights (transformers 5.25 ties them only with tie_word_embeddings). What
differs per use is per layer: the LoRA adapters (``adapters``: one ``B(A(x))`` per use, added to q/k/v and to the MLP's
fused gate_up projection; stored in the copy under the use index, HF's ``*_adapter_list.{k}``), the output projection
and the K/V cache (a paged cache per using layer, even though the projections are shared). The runtime helpers are
runtime/layers/shared_block/.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ..ir import Module, Norm, Rope, RopeTable, Value
from ..spec_types import Expression, Identifier, NormSpec, RopeSpec, Strict
from ._kind import Kind, LoweringContext


class SharedAttentionSpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. self_attn")
    num_heads: Expression = Field(description="query heads (num_attention_heads)")
    num_kv_heads: Expression = Field(description="K/V heads (num_key_value_heads)")
    head_dim: Expression = Field(description="per-head width; heads * head_dim is the input width (Zamba2: 2 * hidden // heads)")
    scale: Expression = Field(description="softmax scale (Zamba2: (head_dim / 2) ** -0.5)")
    rope: RopeSpec = Field(description="the rotary embedding when `rope_when` holds (q and k, the whole head)")
    rope_when: Expression = Field(default=True, description="config expression: rotate q and k (Zamba2 use_mem_rope)")


class SharedMLPSpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. feed_forward")
    activation: Literal["gelu", "gelu_tanh", "silu"] = Field(description="act in down(act(gate) * up): hidden_act")
    intermediate_size: Expression = Field(description="hidden width of the MLP (intermediate_size)")
    bias: Expression = Field(default=False, description="gate_up_proj / down_proj biases (add_bias_linear)")


class AdapterSpec(Strict):
    rank: Expression = Field(description="rank r of every adapter (adapter_rank); the fused gate_up projection "
                             "always has one, [r, hidden] + [2 * intermediate, r] (transformers' Zamba2MLP builds "
                             "it whatever use_shared_mlp_adapter says)")
    attention: Expression = Field(default=False, description="q/k/v adapters, each [r, in] + [heads * head_dim, r] "
                                  "(use_shared_attention_adapter)")


class OutputProjSpec(Strict):
    name: Identifier = Field(description="per-layer module / checkpoint name, e.g. linear")
    bias: bool = Field(default=False, description="the projection has a bias")


class SharedBlockSpec(Strict):
    name: Identifier = Field(description="module / checkpoint name in each using layer, e.g. shared_transformer")
    kind: Literal["shared_block"] = Field(description="shared_block: a transformer block shared between layers")
    copies: Expression = Field(description="distinct weight sets, used round-robin by depth (num_mem_blocks)")
    tied: Expression = Field(
        default=True, description="config expression: the copies really are shared; false: every using layer keeps "
        "its own weights, the adapters still laid out by `copies` (transformers ties Zamba2's shared_transformer "
        "modules through _tied_weights_keys, which it applies only with tie_word_embeddings)",
    )
    input: Literal["concat_embeddings", "hidden"] = Field(
        description="concat_embeddings: concat(hidden, the token embeddings), 2 * hidden wide (Zamba2); hidden: x")
    attention_norm: NormSpec = Field(description="norm of the block's input (input_layernorm, over the input width)")
    attention: SharedAttentionSpec = Field(description="the attention (projections shared, K/V cache per layer)")
    mlp_norm: NormSpec = Field(description="norm of the attention output (pre_ff_layernorm)")
    mlp: SharedMLPSpec = Field(description="the gated MLP, gate and up stored fused as gate_up_proj")
    adapters: AdapterSpec = Field(description="per-use LoRA adapters")
    output_proj: OutputProjSpec = Field(description="per-layer projection of the block's output back to hidden")


@dataclass(frozen=True, kw_only=True)
class SharedBlock(Module):
    kind = "shared_block"
    slot = "shared"
    class_suffix = "SharedBlock"

    copies: Value
    tied: Value
    concat_embeddings: bool
    attention_norm: Norm
    attention_name: str
    num_heads: Value
    num_kv_heads: Value
    head_dim: Value
    scale: Value
    rope: Rope
    rope_when: Value
    mlp_norm: Norm
    mlp_name: str
    activation: str
    intermediate_size: Value
    mlp_bias: Value
    adapter_rank: Value
    attention_adapters: Value
    output_name: str
    output_bias: bool

    @property
    def input_width_factor(self) -> int:
        return 2 if self.concat_embeddings else 1

    def rope_table(self) -> RopeTable | None:
        return None if self.rope_when.never else RopeTable(rotary_dim=self.head_dim, rope=self.rope)

    def readme_rows(self, target: str) -> list[tuple[str, str]]:
        src = "concat(hidden, embeddings)" if self.concat_embeddings else "hidden"
        return [
            ("shared block", f"`{self.copies.spec}` weight sets used round-robin; input {src}; attention "
                             f"`{self.num_heads.spec}` heads of `{self.head_dim.spec}` (RoPE when "
                             f"`{self.rope_when.spec}`), gated {self.activation} MLP of `{self.intermediate_size.spec}`; "
                             f"per-use LoRA of rank `{self.adapter_rank.spec}` (q/k/v when "
                             f"`{self.attention_adapters.spec}`, gate_up always); "
                             f"per-layer `{self.output_name}` projection; a paged K/V cache per using layer"),
        ]


def lower(ctx: LoweringContext, p: tuple[Any, ...], s: SharedBlockSpec) -> SharedBlock:
    a, m, ad = s.attention, s.mlp, s.adapters
    return SharedBlock(
        name=s.name,
        copies=ctx.value(p + ("copies",), s.copies),
        tied=ctx.value(p + ("tied",), s.tied),
        concat_embeddings=s.input == "concat_embeddings",
        attention_norm=ctx.norm(p + ("attention_norm",), s.attention_norm),
        attention_name=a.name,
        num_heads=ctx.value(p + ("attention", "num_heads"), a.num_heads),
        num_kv_heads=ctx.value(p + ("attention", "num_kv_heads"), a.num_kv_heads),
        head_dim=ctx.value(p + ("attention", "head_dim"), a.head_dim),
        scale=ctx.value(p + ("attention", "scale"), a.scale),
        rope=ctx.rope(p + ("attention", "rope"), a.rope),
        rope_when=ctx.value(p + ("attention", "rope_when"), a.rope_when),
        mlp_norm=ctx.norm(p + ("mlp_norm",), s.mlp_norm),
        mlp_name=m.name,
        activation=m.activation,
        intermediate_size=ctx.value(p + ("mlp", "intermediate_size"), m.intermediate_size),
        mlp_bias=ctx.value(p + ("mlp", "bias"), m.bias),
        adapter_rank=ctx.value(p + ("adapters", "rank"), ad.rank),
        attention_adapters=ctx.value(p + ("adapters", "attention"), ad.attention),
        output_name=s.output_proj.name,
        output_bias=s.output_proj.bias,
    )


KIND = Kind(name="shared_block", spec=SharedBlockSpec, ir=SharedBlock, lower=lower)
