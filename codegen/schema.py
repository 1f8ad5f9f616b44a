"""The spec language, as strict pydantic v2 models.

A spec has one section per concern, in the order a reviewer checks it against the HF files:
  ``hf``          which ``architectures`` / ``model_type`` it serves and which modeling file is the reference;
  ``config``      the HF ``config.json`` fields the model reads (type, default, alternative spellings);
  ``derived``     values computed from them with the safe expression language (codegen/expr.py);
  ``layers``      how many layers and which block each one uses (a name, or a rule over the layer index ``i``);
  ``blocks``      each block kind: norms, the attention (with its RoPE and KV-cache declaration), the MLP;
  ``embedding`` / ``final_norm`` / ``lm_head``;
  ``checkpoint``  HF tensor names -> parameters: fusions with shard ids, ignored keys, renames.

Every model forbids unknown keys; :func:`modelgen.codegen.lower.load_spec` turns pydantic's errors into ``file:line:col``.
Expression-valued fields are plain strings/numbers here and are parsed and checked in lowering.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Expression = Union[str, int, float, bool]  # parsed by codegen.expr in lowering


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ----------------------------------------------------------------------------------------------------------------- hf
class HFSection(_Strict):
    architectures: list[str] = Field(min_length=1, description="config.json `architectures` values this spec serves")
    model_type: str = Field(description="config.json `model_type`")
    modeling: str = Field(description="the transformers modeling file this spec is checked against")


# ------------------------------------------------------------------------------------------------------------- config
FieldType = Literal["int", "float", "bool", "str", "rope_scaling", "int_list", "str_list"]


class ConfigField(_Strict):
    """One HF config.json field the model reads."""

    type: FieldType
    default: Expression | None = Field(
        default=None, description="literal or expression over other fields; absent = the field is required"
    )
    required: bool = Field(default=False, description="derived: true when no default is given")
    nullable: bool = Field(default=False, description="null is a legal value (otherwise null means 'use the default')")
    read: list[str] | None = Field(
        default=None,
        description="config keys tried in order (dotted = nested, e.g. rope_parameters.rope_theta); default: the field name",
    )
    doc: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        # `vocab_size: int` is shorthand for `vocab_size: {type: int}` (a required field).
        if isinstance(data, str):
            return {"type": data, "required": True}
        if isinstance(data, dict) and "default" not in data and "required" not in data and not data.get("nullable"):
            return {**data, "required": True}
        return data


# ------------------------------------------------------------------------------------------------------------- blocks
class NormSpec(_Strict):
    name: str = Field(description="module / checkpoint name, e.g. input_layernorm")
    kind: Literal["rms"] = Field(description="rms: x * rsqrt(mean(x^2) + eps) * weight (LlamaRMSNorm)")
    eps: Expression


class RopeSpec(_Strict):
    style: Literal["rotate_half", "pairwise"] = Field(
        description="rotate_half: HF Llama (pairs i, i+d/2); pairwise: GPT-J / llama.cpp (pairs 2i, 2i+1)"
    )
    theta: Expression
    scaling: Expression | None = Field(default=None, description="the rope_scaling / rope_parameters dict field")
    max_position: Expression
    partial_factor: Expression = Field(default=1.0, description="fraction of head_dim that is rotated")


class KVCacheSpec(_Strict):
    """What a layer needs the engine to allocate (the Neuron guide's LayerSpec)."""

    kind: Literal["paged_kv"] = Field(description="paged_kv: K and V blocks [num_blocks, kv_heads, block_size, head_dim]")


class QKNormSpec(_Strict):
    """Per-head RMSNorm of queries and keys before RoPE (Qwen3 ``q_norm``/``k_norm``, GLM4-MoE ``use_qk_norm``)."""

    kind: Literal["rms"]
    eps: Expression
    enabled: Expression = Field(default=True, description="expression; false builds no norm (GLM4 use_qk_norm)")
    q_name: str = "q_norm"
    k_name: str = "k_norm"


class AttentionSpec(_Strict):
    name: str = Field(description="module / checkpoint name, e.g. self_attn")
    kind: Literal["gqa"] = Field(description="gqa: multi-/grouped-/multi-query attention (kv heads divide heads)")
    num_heads: Expression
    num_kv_heads: Expression
    head_dim: Expression
    qkv_bias: Expression = False
    o_bias: Expression = False
    scale: Expression | None = Field(default=None, description="softmax scale; default head_dim ** -0.5")
    qk_norm: QKNormSpec | None = None
    rope: RopeSpec
    kv_cache: KVCacheSpec


class MLPSpec(_Strict):
    name: str = Field(description="module / checkpoint name, e.g. mlp")
    kind: Literal["gated"] = Field(description="gated: down(act(gate(x)) * up(x)) (SwiGLU)")
    activation: Literal["silu", "gelu_tanh"]
    intermediate_size: Expression
    bias: Expression = False


class RouterSpec(_Strict):
    """Top-k expert selection (HF ``*TopKRouter``): scores, optional grouped top-k and bias, renormalisation."""

    name: str = Field(default="gate", description="module / checkpoint name of the router linear")
    scoring: Literal["softmax", "sigmoid"] = Field(description="softmax: Mixtral/Qwen3-MoE; sigmoid: GLM4-MoE/DeepSeek-V3")
    top_k: Expression
    renormalize: Expression = Field(default=False, description="divide the top-k weights by their sum (norm_topk_prob)")
    n_group: Expression | None = Field(default=None, description="grouped top-k: number of expert groups")
    topk_group: Expression | None = Field(default=None, description="grouped top-k: groups kept per token")
    correction_bias: bool = Field(default=False, description="e_score_correction_bias: added for selection only")
    routed_scaling_factor: Expression = 1.0
    float32: bool = Field(default=False, description="router weight and math kept in float32 (GLM4-MoE)")
    weights_in_model_dtype: bool = Field(
        default=False, description="top-k weights cast to the model dtype before combining (Qwen3-MoE)"
    )


class SharedExpertsSpec(_Strict):
    name: str = "shared_experts"
    count: Expression = Field(default=1, description="number of shared experts (n_shared_experts)")
    intermediate_size: Expression = Field(description="total width of the shared expert MLP (count x expert width)")
    fuse: bool = Field(
        default=False,
        description="run them as `count` extra expert slots of the fused MoE op (weight 1) where the target's MoE op "
        "allows it (rocm, as ATOM's shared-expert fusion); otherwise a separate gated MLP",
    )


class MoESpec(_Strict):
    name: str = Field(description="module / checkpoint name, e.g. mlp")
    kind: Literal["moe"] = Field(description="moe: routed experts (+ optional shared experts), fused MoE op")
    num_experts: Expression
    intermediate_size: Expression = Field(description="per-expert intermediate width (moe_intermediate_size)")
    activation: Literal["silu"]
    router: RouterSpec
    shared_experts: SharedExpertsSpec | None = None
    experts_name: str = "experts"


class BlockSpec(_Strict):
    residual: Literal["pre_norm"] = Field(description="pre_norm: x + f(norm(x)) around each sub-layer")
    attention_norm: NormSpec
    attention: AttentionSpec
    mlp_norm: NormSpec
    mlp: Annotated[Union[MLPSpec, MoESpec], Field(discriminator="kind")]


class LayersSpec(_Strict):
    count: Expression
    block: str | None = Field(default=None, description="the block every layer uses")
    block_rule: Expression | None = Field(
        default=None, description="expression over the layer index `i` and config fields giving a block name"
    )

    @model_validator(mode="after")
    def _one_of(self) -> "LayersSpec":
        if (self.block is None) == (self.block_rule is None):
            raise ValueError("give exactly one of `block` or `block_rule`")
        return self


class EmbeddingSpec(_Strict):
    name: str = "embed_tokens"
    vocab_size: Expression = Field(description="rows of the embedding / LM head")
    hidden_size: Expression = Field(description="model width (residual stream)")


class LMHeadSpec(_Strict):
    name: str = "lm_head"
    tie: Expression = Field(default=False, description="share the embedding weight (tie_word_embeddings)")


# --------------------------------------------------------------------------------------------------------- checkpoint
class ExpertCheckpointSpec(_Strict):
    """Checkpoint names of routed experts, relative to the MoE module; ``{e}`` is the expert index.

    Both layouts load into the stacked ``w13`` ``[E, 2I, H]`` (gate then up) and ``w2`` ``[E, H, I]`` parameters.
    """

    per_expert: dict[Literal["gate", "up", "down"], str] = Field(
        description="e.g. {gate: experts.{e}.gate_proj.weight, up: experts.{e}.up_proj.weight, down: ...}"
    )
    fused: dict[Literal["gate_up", "down"], str] | None = Field(
        default=None, description="transformers v5 fused names: gate_up_proj [E, 2I, H], down_proj [E, H, I]"
    )


class Requirement(_Strict):
    check: Expression = Field(description="expression over config fields that must be true")
    message: str


class CheckpointSpec(_Strict):
    prefix: str = Field(default="model", description="module prefix of the backbone in HF names (model.layers...)")
    fuse: dict[str, dict[Union[str, int], str]] = Field(
        default_factory=dict,
        description="fused parameter -> {shard id: checkpoint module}, e.g. qkv_proj: {q: q_proj, k: k_proj, v: v_proj}",
    )
    ignore: list[str] = Field(default_factory=list, description="checkpoint keys dropped on purpose (* = any segment)")
    rename: dict[str, str] = Field(
        default_factory=dict,
        description="substring renames applied to checkpoint keys (weight_scale_inv: weight_scale, .block_sparse_moe.: .mlp.)",
    )
    experts: ExpertCheckpointSpec | None = None

    @field_validator("fuse")
    @classmethod
    def _shard_ids(cls, v: dict[str, dict[Any, str]]) -> dict[str, dict[Any, str]]:
        for param, shards in v.items():
            if len(shards) < 2:
                raise ValueError(f"fusion '{param}' needs at least two checkpoint modules")
        return v


# ---------------------------------------------------------------------------------------------------------------- top
class Spec(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="python package name of the generated model")
    class_prefix: str = Field(pattern=r"^[A-Z][A-Za-z0-9]*$", description="class name prefix, e.g. Llama")
    description: str
    hf: HFSection
    config: dict[str, ConfigField]
    derived: dict[str, Expression] = Field(default_factory=dict)
    requires: list[Requirement] = Field(
        default_factory=list, description="config checks the generated from_hf_config enforces (unsupported features)"
    )
    layers: LayersSpec
    blocks: Annotated[dict[str, BlockSpec], Field(min_length=1)]
    embedding: EmbeddingSpec
    final_norm: NormSpec
    lm_head: LMHeadSpec = LMHeadSpec()
    checkpoint: CheckpointSpec = CheckpointSpec()
