"""mla: multi-head latent attention of DeepSeek-V2/V3 (HF ``DeepseekV3Attention``): low-rank query
(``q_a_proj`` -> ``q_a_layernorm`` -> ``q_b_proj``, or ``q_proj`` when ``q_lora_rank`` is null), compressed KV
(``kv_a_proj_with_mqa`` -> ``kv_a_layernorm`` latent + a shared RoPE key), ``kv_b_proj`` absorbed into the query and
the output, RoPE on the rope part only (interleaved pairs when the config says so), YaRN mscale in the softmax scale.

Its cache is one latent per token (``paged_latent``: ``kv_lora_rank + qk_rope_head_dim`` values per token and layer),
declared by the generated class's ``kv_spec()``. Runtime: runtime/layers/mla/layer.py (rocm), runtime/layers/mla/ops.py
(both).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ..ir import Module, Rope, RopeTable, Value
from ..spec_types import Expression, Identifier, RopeSpec, Strict
from ._kind import Kind, LoweringContext


class LatentCacheSpec(Strict):
    kind: Literal["paged_latent"] = Field(
        description="paged_latent: blocks [num_blocks, block_size, kv_lora_rank + qk_rope_head_dim] per layer"
    )


class IndexerSpec(Strict):
    """DeepSeek Sparse Attention's indexer (V3.2, GLM-5): ``indexer.{wq_b, wk, k_norm, weights_proj}``."""

    num_heads: Expression = Field(description="index_n_heads")
    head_dim: Expression = Field(description="index_head_dim (its first qk_rope_head_dim dims are rotated)")
    topk: Expression = Field(description="index_topk: keys each query attends, by index score")
    rope_style: Literal["rotate_half", "pairwise"] = Field(
        description="the indexer's RoPE layout: rotate_half (DeepSeek-V3.2), pairwise (GLM-5's interleaved pairs)"
    )
    shared: bool = Field(
        default=False,
        description="this layer has no indexer of its own (no indexer.* weights): it reuses the top-k selection of "
        "the nearest earlier layer that has one (GLM-5 indexer_types 'shared', HF prev_topk_indices); its cache row "
        "keeps that layer's index keys so the selection is recomputed identically",
    )


class MLASpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. self_attn")
    kind: Literal["mla"] = Field(description="mla: multi-head latent attention (DeepSeek-V2/V3)")
    num_heads: Expression = Field(description="attention heads, usually num_attention_heads")
    q_lora_rank: Expression = Field(description="expression; null at run time builds q_proj instead of q_a/q_b")
    kv_lora_rank: Expression = Field(description="latent width of keys/values, kv_lora_rank (V3: 512)")
    qk_nope_head_dim: Expression = Field(description="per-head query/key width without RoPE, qk_nope_head_dim")
    qk_rope_head_dim: Expression = Field(description="per-head RoPE width shared by all heads, qk_rope_head_dim")
    v_head_dim: Expression = Field(description="per-head value width, v_head_dim")
    bias: Expression = Field(default=False, description="bias of q_a_proj, kv_a_proj_with_mqa and o_proj")
    latent_norm_eps: Expression = Field(
        default=1.0e-6, description="eps of q_a_layernorm / kv_a_layernorm (HF builds them with its default 1e-6)"
    )
    rope_interleave: Expression = Field(
        default=False, description="expression; true rotates interleaved pairs (2i, 2i+1), false uses rope.style"
    )
    scale: Expression | None = Field(
        default=None, description="softmax scale; default qk_head_dim ** -0.5 with YaRN's mscale_all_dim folded in"
    )
    rope: RopeSpec = Field(
        description="rotary embedding of the qk_rope_head_dim part: theta (rope_theta), scaling (rope_scaling, YaRN)",
    )
    indexer: IndexerSpec | None = Field(default=None, description="DSA sparse attention (needs q_lora_rank)")
    kv_cache: LatentCacheSpec = Field(description="the cache this attention declares, e.g. {kind: paged_latent}")


@dataclass(frozen=True)
class Indexer:
    num_heads: Value
    head_dim: Value
    topk: Value
    rope_style: str
    shared: bool = False  # reuses the nearest earlier indexer's selection (no weights of its own)


@dataclass(frozen=True, kw_only=True)
class MLAttention(Module):
    kind = "mla"
    slot = "attention"
    class_suffix = "Attention"

    num_heads: Value
    q_lora_rank: Value
    kv_lora_rank: Value
    qk_nope_head_dim: Value
    qk_rope_head_dim: Value
    v_head_dim: Value
    bias: Value
    latent_norm_eps: Value
    rope_interleave: Value
    scale: Value | None
    rope: Rope
    indexer: Indexer | None
    kv_cache: str

    def rope_table(self) -> RopeTable:
        return RopeTable(rotary_dim=self.qk_rope_head_dim, rope=self.rope)

    def readme_rows(self, target: str) -> list[tuple[str, str]]:
        r, dr = self.kv_lora_rank.spec, self.qk_rope_head_dim.spec
        rows = [
            ("num_attention_heads", f"`{self.num_heads.spec}`"),
            ("query", f"`q_a_proj` -> RMSNorm -> `q_b_proj` (rank `{self.q_lora_rank.spec}`), `q_proj` when null"),
            ("latent KV", f"`kv_a_proj_with_mqa` -> `{r}` latent (RMSNorm) + shared RoPE key `{dr}`; `kv_b_proj` "
                          "absorbed into the query (W_UK) and the output (W_UV)"),
            ("head dims", f"qk nope `{self.qk_nope_head_dim.spec}` + rope `{dr}`, v `{self.v_head_dim.spec}`"),
            ("RoPE", f"on the rope part only; interleaved pairs when `{self.rope_interleave.spec}`, else "
                     f"{self.rope.style}; theta `{self.rope.theta.spec}`, scaling `{self.rope.scaling.spec}` (YaRN "
                     "mscale_all_dim folded into the softmax scale)"),
        ]
        idx = ""
        if self.indexer is not None:
            i = self.indexer
            idx = f" + {i.head_dim.spec}"
            if i.shared:
                rows.append(("DSA indexer", f"shared: the top-`{i.topk.spec}` selection of the nearest earlier layer "
                                            "with an indexer (no indexer weights; its index keys kept in the cache)"))
            else:
                rows.append(("DSA indexer", f"`{i.num_heads.spec}` heads of `{i.head_dim.spec}` ({i.rope_style} "
                                            f"RoPE), each query attends its top-`{i.topk.spec}` keys by index score "
                                            "(causal first)"))
        rows.append(("KV cache", f"{self.kv_cache}: `[num_blocks, block_size, {r} + {dr}{idx}]` per layer, "
                                 f"`({r} + {dr}{idx}) x dtype bytes` per token (GQA with the same heads: "
                                 "`2 x heads x head_dim x dtype bytes`)"))
        return rows


def lower(ctx: LoweringContext, p: tuple[Any, ...], a: MLASpec) -> MLAttention:
    rope = ctx.rope(p + ("rope",), a.rope)
    if rope.partial_factor is not None:
        ctx.error(p + ("rope", "partial_factor"), "mla rotates its qk_rope_head_dim part whole; drop partial_factor")
    indexer = None
    if a.indexer is not None:
        i, ip = a.indexer, p + ("indexer",)
        indexer = Indexer(num_heads=ctx.value(ip + ("num_heads",), i.num_heads),
                          head_dim=ctx.value(ip + ("head_dim",), i.head_dim),
                          topk=ctx.value(ip + ("topk",), i.topk), rope_style=i.rope_style, shared=i.shared)
    return MLAttention(
        name=a.name,
        num_heads=ctx.value(p + ("num_heads",), a.num_heads),
        q_lora_rank=ctx.value(p + ("q_lora_rank",), a.q_lora_rank),
        kv_lora_rank=ctx.value(p + ("kv_lora_rank",), a.kv_lora_rank),
        qk_nope_head_dim=ctx.value(p + ("qk_nope_head_dim",), a.qk_nope_head_dim),
        qk_rope_head_dim=ctx.value(p + ("qk_rope_head_dim",), a.qk_rope_head_dim),
        v_head_dim=ctx.value(p + ("v_head_dim",), a.v_head_dim),
        bias=ctx.value(p + ("bias",), a.bias),
        latent_norm_eps=ctx.value(p + ("latent_norm_eps",), a.latent_norm_eps),
        rope_interleave=ctx.value(p + ("rope_interleave",), a.rope_interleave),
        scale=ctx.optional(p + ("scale",), a.scale),
        rope=rope,
        indexer=indexer,
        kv_cache=a.kv_cache.kind,
    )


KIND = Kind(name="mla", spec=MLASpec, ir=MLAttention, lower=lower)
