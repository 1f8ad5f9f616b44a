"""gqa: multi-/grouped-/multi-query self-attention (LlamaAttention): fused QKV, RoPE, optional per-head QK RMSNorm
(Qwen3 ``q_norm``/``k_norm``, GLM4-MoE ``use_qk_norm``), a paged K/V cache declared by the class (``kv_spec()``),
optional sliding window and per-head attention sinks (GPT-OSS).

Per-layer windows: ``sliding_window`` is a config expression of the block, not of the layer index, so a model whose
layers differ (GPT-OSS ``layer_types``: sliding / full) declares one block per layer type and picks it with
``layers.block_rule`` (``'sliding' if layer_types[i] == 'sliding_attention' else 'full'``). Each block's attention
becomes its own class whose window is fixed at construction, as HF's ``self.sliding_window`` is per layer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ..ir import Code, Const, Module, Norm, Rope, RopeTable, Value, norm_module
from ..spec_types import NORM_KINDS_DOC, Expression, Identifier, NormKind, RopeSpec, Strict
from ._kind import Kind, LoweringContext


# ------------------------------------------------------------------------------------------------------------ schema
class QKNormSpec(Strict):
    """RMSNorm of queries and keys before RoPE, per head or over the whole projection."""

    kind: NormKind = Field(description=NORM_KINDS_DOC)
    eps: Expression = Field(description="epsilon, e.g. rms_norm_eps")
    enabled: Expression = Field(default=True, description="expression; false builds no norm (GLM4 use_qk_norm)")
    q_name: Identifier = Field(default="q_norm", description="module / checkpoint name of the query norm")
    k_name: Identifier = Field(default="k_norm", description="module / checkpoint name of the key norm")
    bias: bool = Field(
        default=False, description="layer_norm, scope head only: the norms have a bias (Phi qk_layernorm: "
        "nn.LayerNorm(head_dim)); StableLM's per-head norms have none",
    )
    affine: bool = Field(
        default=True, description="false: no learned weight, x * rsqrt(mean(x^2) + eps) only (Llama 4's weightless "
        "L2 qk_norm); an RMS kind",
    )
    after_rope: bool = Field(
        default=False,
        description="true: q and k are normed after RoPE, not before (HunYuan query_layernorm / key_layernorm, Llama 4 "
        "qk_norm); a per-head scope, without clip_qkv",
    )
    scope: Literal["head", "projection", "each_head", "stacked"] = Field(
        default="head",
        description="head: one norm over head_dim applied to every head (Qwen3 q_norm [head_dim]); projection: over "
        "the whole q / k projection before it is split into heads (OLMo 2 q_norm [heads * head_dim]; an RMS kind; "
        "under tensor parallelism the variance is all-reduced over the ranks' heads); each_head: a norm over head_dim per head with its "
        "own weights, checkpoint `<q_name>.norms.{h}` (StableLM qk_layernorm; tensor parallelism > 1 refused); stacked: "
        "a layer_norm over head_dim per head, the weights one tensor `[heads, head_dim]` (Command R+ use_qk_norm: "
        "CohereLayerNorm((heads, head_dim)), mean-subtracted, float32, no bias; each rank holds its heads' rows)",
    )


class TemperatureTuningSpec(Strict):
    """Llama 4's attention temperature tuning (arXiv 2501.19399): q scaled per position after RoPE and the QK norm."""

    enabled: Expression = Field(default=True, description="expression, e.g. attn_temperature_tuning")
    floor_scale: Expression = Field(description="positions per step of the scale (floor_scale)")
    attn_scale: Expression = Field(description="slope of the scale (attn_scale)")


class AlibiSpec(Strict):
    """ALiBi (Press et al.): a per-head linear position bias on the attention scores in place of RoPE."""

    scale: Expression = Field(
        default=1.0, description="multiplier of the bias slopes[h] * k (Falcon: falcon_head_dim ** -0.5, as its "
        "bias joins the mask over the scaled scores; BLOOM: 1)",
    )
    bf16: bool = Field(
        default=False, description="true: slopes[h] * k is formed in bfloat16 (HF Falcon build_alibi_tensor rounds "
        "the slopes and the product to bfloat16); false: float32",
    )


class KVCacheSpec(Strict):
    """What a layer needs the engine to allocate (the Neuron guide's LayerSpec)."""

    kind: Literal["paged_kv"] = Field(
        description="paged_kv: K and V blocks [num_blocks, kv_heads, block_size, head_dim]"
    )


class GQASpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. self_attn")
    kind: Literal["gqa"] = Field(description="gqa: multi-/grouped-/multi-query attention (kv heads divide heads)")
    num_heads: Expression = Field(description="query heads, usually num_attention_heads")
    num_kv_heads: Expression = Field(description="key/value heads (num_key_value_heads; = heads: MHA, 1: MQA)")
    head_dim: Expression = Field(description="per-head width: head_dim, or hidden_size // num_attention_heads")
    qkv_bias: Expression = Field(default=False, description="q/k/v projections have a bias, e.g. attention_bias")
    o_bias: Expression = Field(default=False, description="the output projection has a bias, e.g. attention_bias")
    scale: Expression | None = Field(default=None, description="softmax scale; default head_dim ** -0.5")
    qk_norm: QKNormSpec | None = Field(
        default=None, description="norms of queries and keys before RoPE (Qwen3 q_norm/k_norm), e.g. {kind: rms, eps: "
        "rms_norm_eps}",
    )
    output_gate: bool = Field(
        default=False,
        description="q_proj also emits a per-head output gate ([query | gate], 2 x head_dim rows per head); the "
        "attention output is multiplied by sigmoid(gate) before o_proj (Qwen3-Next / Qwen3.5 full attention)",
    )
    rope: RopeSpec = Field(
        description="rotary embedding: style, theta (rope_theta), scaling (rope_scaling), max_position "
        "(max_position_embeddings)",
    )
    kv_cache: KVCacheSpec = Field(description="the cache this attention declares, e.g. {kind: paged_kv}")
    temperature_tuning: TemperatureTuningSpec | None = Field(
        default=None,
        description="q multiplied by log(floor((pos + 1) / floor_scale) + 1) * attn_scale + 1 per token position, "
        "in float32, before attention (Llama 4 attn_temperature_tuning on its NoPE layers)",
    )
    sliding_window: Expression | None = Field(
        default=None,
        description="expression: window W in tokens (a query at position q sees keys k with q - W < k <= q, "
        "transformers' sliding_window_overlay); null, or an expression that evaluates to None: full attention",
    )
    chunk_size: Expression | None = Field(
        default=None,
        description="expression: attention chunk C in tokens (a query at position q sees keys k <= q with k // C "
        "== q // C, transformers' chunked_overlay: Llama 4 attention_chunk_size on its RoPE layers); null, or an "
        "expression that evaluates to None: no chunking",
    )
    alibi: AlibiSpec | None = Field(
        default=None,
        description="ALiBi: scores of head h for the key at position k get scale * slopes[h] * k (slopes: 2 ** (-8 i "
        "/ n) over the largest power of two n <= heads, then the odd powers of 2 ** (-4 / n) for the rest, HF "
        "build_alibi_tensor; each tensor-parallel rank takes its heads' slopes); with rope {enabled: false} "
        "(Falcon alibi: pick the block by layers.block_rule), e.g. {scale: falcon_head_dim ** -0.5, bf16: true}",
    )
    sinks: bool = Field(
        default=False,
        description="a learned logit per query head (checkpoint `<name>.sinks [num_heads]`) joins the softmax "
        "denominator without a value (GPT-OSS attention sinks); heads are sharded with tensor parallelism",
    )
    softcap: Expression | None = Field(
        default=None,
        description="expression: attention logits (after the scale) -> cap * tanh(logits / cap) before the mask and "
        "softmax (Gemma 2 attn_logit_softcapping); evaluating to None: off",
    )
    clip_qkv: Expression | None = Field(
        default=None,
        description="expression: q, k and v projections (bias included) clamped to [-c, c] (OLMo clip_qkv); with "
        "a qk_norm, q and k are clamped after the norm (OLMoE's order); evaluating to None: off",
    )


# ---------------------------------------------------------------------------------------------------------------- IR
@dataclass(frozen=True)
class QKNorm:
    kind: str  # a NormKind
    eps: Value
    enabled: Value  # .always: built unconditionally
    q_name: str
    k_name: str
    scope: str = "head"  # "head" | "projection"
    bias: bool = False  # layer_norm, head scope: a learned bias per norm (Phi)
    after_rope: bool = False  # normed after RoPE (HunYuan, Llama 4), not before
    affine: bool = True  # False: weightless (Llama 4's L2 qk_norm)

    def norm(self, name: str) -> Norm:
        """The q or k norm as an IR norm over head_dim (its bias only where the spec gives one)."""
        return Norm(name=name, kind=self.kind, eps=self.eps, bias=Const(self.bias), affine=self.affine)

    def module(self, name: str, dim_py: str, heads_py: str = "", kv: bool = False, tp: str = "") -> str:
        """Constructor source of the q or k norm over ``dim_py`` features (``each_head``: one per ``heads_py``;
        ``projection`` / ``stacked``: over ``heads_py`` heads of ``dim_py``, sharded with them, ``kv`` for the key
        heads; ``tp``: extra constructor arguments of a stacked norm, e.g. vLLM's rank and world)."""
        if self.scope == "projection":
            return f"ShardedProjectionRMSNorm({', '.join(self.projection_args(dim_py, heads_py, kv))})"
        if self.scope == "stacked":
            return f"StackedHeadLayerNorm({heads_py}, {dim_py}, eps={self.eps.py}{', kv=True' if kv else ''}{tp})"
        one = norm_module(self.norm(name), dim_py)
        return f"PerHeadNorm([{one} for _ in range({heads_py})])" if self.scope == "each_head" else one

    def projection_args(self, dim_py: str, heads_py: str, kv: bool = False) -> list[str]:
        """Constructor arguments of the runtime ``ShardedProjectionRMSNorm`` (scope ``projection``)."""
        flag = {"zero_centred_rms": ["zero_centred=True"], "rms_float32": ["weight_float32=True"]}.get(self.kind, [])
        return [heads_py, dim_py, f"eps={self.eps.py}"] + (["kv=True"] if kv else []) + flag

    @property
    def tp_refused(self) -> bool:
        """Its weights span heads another rank holds (one norm per checkpoint head): generated code refuses TP > 1."""
        return self.scope == "each_head"


@dataclass(frozen=True, kw_only=True)
class GQAttention(Module):
    kind = "gqa"
    slot = "attention"
    class_suffix = "Attention"
    fused_params = {"qkv_proj": frozenset({"q", "k", "v"})}
    output_reduce_deferrable = True  # o_proj

    num_heads: Value
    num_kv_heads: Value
    head_dim: Value
    qkv_bias: Value
    o_bias: Value
    scale: Value | None  # None: head_dim ** -0.5
    qk_norm: QKNorm | None  # None: no QK norm (also when the spec's `enabled` is literally false)
    output_gate: bool  # q_proj rows are [query_h | gate_h] per head; o_proj(attn * sigmoid(gate))
    rope: Rope
    kv_cache: str
    sliding_window: Value | None = None  # None: full attention (the value may still be None at runtime)
    sinks: bool = False
    softcap: Value | None = None  # None: no attention-logit soft-capping (the value may still be None at runtime)
    clip_qkv: Value | None = None  # None: projections not clamped (the value may still be None at runtime)
    temperature: tuple[Value, Value, Value] | None = None  # (enabled, floor_scale, attn_scale); None: no tuning
    chunk_size: Value | None = None  # None: no chunking (the value may still be None at runtime)
    alibi: tuple[Value, bool] | None = None  # (scale, bf16); None: no ALiBi

    @property
    def qk_norm_in_kernel(self) -> bool:  # type: ignore[override]
        """Per-head RMS-kind QK norms (one weight [head_dim]) are bound to PagedAttention, which runs them before RoPE
        (on the GPU inside the cache-write / decode kernels); LayerNorms and the other scopes are applied in forward."""
        # clip_qkv clamps the normed q and k (HF OLMoE), so with a clip the norm runs in forward, before the clamp.
        return bool(self.qk_norm and self.qk_norm.scope == "head" and self.qk_norm.kind != "layer_norm"
                    and self.clip_qkv is None and not self.qk_norm.after_rope)

    def bias_groups(self) -> list[tuple[Value, list[str]]]:
        """(condition, projections) with one entry per distinct condition, so equal bias flags share one ``if``."""
        groups: dict[Value, list[str]] = {}
        for proj, cond in (("qkv", self.qkv_bias), ("o", self.o_bias)):
            groups.setdefault(cond, []).append(proj)
        return list(groups.items())

    def rope_table(self) -> RopeTable | None:
        if self.rope.nope:
            return None  # a NoPE layer reads no cos|sin table
        rotary_dim = self.head_dim
        if self.rope.partial_factor is not None:
            rotary_dim = Code(
                py=self.rope.rotary_dim_py(self.head_dim.py), spec=self.rope.rotary_dim_py(self.head_dim.spec)
            )
        return RopeTable(rotary_dim=rotary_dim, rope=self.rope)

    def readme_rows(self, target: str) -> list[tuple[str, str]]:
        rope = self.rope
        rows = [
            ("num_attention_heads", f"`{self.num_heads.spec}`"),
            ("num_key_value_heads", f"`{self.num_kv_heads.spec}`"),
            ("head_dim", f"`{self.head_dim.spec}`"),
        ]
        if self.qk_norm is not None:
            when = "" if self.qk_norm.enabled.always else f", when `{self.qk_norm.enabled.spec}`"
            scope = {"head": "per-head", "projection": "whole-projection", "each_head": "per-head-weights",
                     "stacked": "per-head ([heads, head_dim] weight)"}[
                self.qk_norm.scope]
            order = "after" if self.qk_norm.after_rope else "before"
            rows.append(("QK norm", f"{scope} {self.qk_norm.kind} of q and k {order} RoPE{when}"))
        if self.output_gate:
            rows.append(("output gate", "q_proj emits a per-head gate; o_proj(attention * sigmoid(gate))"))
        partial = f", rotating `{rope.partial_factor.spec}` of head_dim" if rope.partial_factor is not None else ""
        if rope.nope:
            rows.append(("RoPE", "none (NoPE layer)"))
        else:
            rows.append(("RoPE", f"{rope.style} layout{partial}, theta `{rope.theta.spec}`, scaling "
                                 f"`{rope.scaling.spec}` (default, linear, dynamic, llama3, yarn)"))
        if self.sliding_window is not None:
            rows.append(("sliding window", f"`{self.sliding_window.spec}` tokens (q - W < k <= q)"))
        if self.chunk_size is not None:
            rows.append(("chunked attention", f"chunks of `{self.chunk_size.spec}` tokens (k // C == q // C, k <= q)"))
        if self.alibi is not None:
            scale, bf16 = self.alibi
            rows.append(("ALiBi", f"`{scale.spec}` * slopes[h] * k on the scores"
                                  + (" (slopes[h] * k in bfloat16)" if bf16 else "")))
        if self.sinks:
            rows.append(("attention sinks", "per-head learned logit `sinks` in the softmax denominator"))
        if self.softcap is not None:
            rows.append(("logit soft-cap", f"`{self.softcap.spec}` * tanh(scores / cap) before the softmax"))
        if self.clip_qkv is not None:
            rows.append(("clip_qkv", f"q, k, v clamped to +-`{self.clip_qkv.spec}`"))
        if self.temperature is not None:
            on, floor, slope = self.temperature
            rows.append(("temperature tuning", f"q x (log(floor((pos + 1) / `{floor.spec}`) + 1) * `{slope.spec}` + 1)"
                                               + ("" if on.always else f", when `{on.spec}`")))
        layout = "`[num_blocks, kv_heads, block_size, head_dim]` per layer (K and V)"
        rows.append(("KV cache", f"{self.kv_cache}: {layout}"))
        return rows


# ---------------------------------------------------------------------------------------------------------- lowering
def lower(ctx: LoweringContext, p: tuple[Any, ...], a: GQASpec) -> GQAttention:
    qk = None
    if a.qk_norm is not None:
        q, qp = a.qk_norm, p + ("qk_norm",)
        if q.scope == "projection" and q.kind == "layer_norm":
            ctx.error(qp + ("kind",), "a whole-projection QK norm is an RMS kind (rms, zero_centred_rms, rms_float32)")
        if q.bias and (q.kind != "layer_norm" or q.scope != "head"):
            ctx.error(qp + ("bias",), "a QK-norm bias needs kind layer_norm and scope head")
        if q.after_rope and (q.scope == "projection" or a.clip_qkv is not None):
            ctx.error(qp + ("after_rope",), "a QK norm after RoPE is per head (not scope projection), without clip_qkv")
        if not q.affine and (q.kind == "layer_norm" or q.scope != "head"):
            ctx.error(qp + ("affine",), "a weightless QK norm is an RMS kind with scope head")
        if q.scope == "stacked" and q.kind != "layer_norm":
            ctx.error(qp + ("kind",), "a stacked per-head QK norm (one [heads, head_dim] weight) is a layer_norm")
        enabled = ctx.value(qp + ("enabled",), q.enabled)
        if not enabled.never:
            qk = QKNorm(kind=q.kind, eps=ctx.value(qp + ("eps",), q.eps), enabled=enabled, q_name=q.q_name,
                        k_name=q.k_name, scope=q.scope, bias=q.bias, after_rope=q.after_rope, affine=q.affine)
    if a.alibi is not None and a.rope.enabled:
        ctx.error(p + ("alibi",), "ALiBi replaces RoPE: give the block rope: {enabled: false} (pick it with "
                  "layers.block_rule, e.g. 'alibi' if alibi else 'decoder')")
    return GQAttention(
        name=a.name,
        num_heads=ctx.value(p + ("num_heads",), a.num_heads),
        num_kv_heads=ctx.value(p + ("num_kv_heads",), a.num_kv_heads),
        head_dim=ctx.value(p + ("head_dim",), a.head_dim),
        qkv_bias=ctx.value(p + ("qkv_bias",), a.qkv_bias),
        o_bias=ctx.value(p + ("o_bias",), a.o_bias),
        scale=ctx.optional(p + ("scale",), a.scale),
        qk_norm=qk,
        output_gate=a.output_gate,
        rope=ctx.rope(p + ("rope",), a.rope),
        kv_cache=a.kv_cache.kind,
        sliding_window=ctx.optional(p + ("sliding_window",), a.sliding_window),
        sinks=a.sinks,
        softcap=ctx.optional(p + ("softcap",), a.softcap),
        clip_qkv=ctx.optional(p + ("clip_qkv",), a.clip_qkv),
        chunk_size=ctx.optional(p + ("chunk_size",), a.chunk_size),
        alibi=None if a.alibi is None else (ctx.value(p + ("alibi", "scale"), a.alibi.scale), a.alibi.bf16),
        temperature=None if a.temperature_tuning is None else tuple(
            ctx.value(p + ("temperature_tuning", f), getattr(a.temperature_tuning, f))
            for f in ("enabled", "floor_scale", "attn_scale")),
    )


KIND = Kind(name="gqa", spec=GQASpec, ir=GQAttention, lower=lower)
