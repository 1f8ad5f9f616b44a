"""The spec language, as strict pydantic v2 models.

A spec has one section per concern, in the order a reviewer checks it against the HF files:
  ``hf``          which ``architectures`` / ``model_type`` it serves and which modeling file is the reference;
  ``config``      the HF ``config.json`` fields the model reads (type, default, alternative spellings);
  ``derived``     values computed from them with the safe expression language (codegen/expr.py);
  ``layers``      how many layers and which block each one uses (a name, or a rule over the layer index ``i``);
  ``blocks``      each block kind: norms, the attention (with its RoPE and KV-cache declaration), the MLP;
  ``embedding`` / ``final_norm`` / ``lm_head``;
  ``checkpoint``  HF tensor names -> parameters: fusions with shard ids, ignored keys, renames.

Every model forbids unknown keys; :func:`codegen.lower.load_spec` turns pydantic's errors into ``file:line:col``.
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


class AttentionSpec(_Strict):
    name: str = Field(description="module / checkpoint name, e.g. self_attn")
    kind: Literal["gqa"] = Field(description="gqa: multi-/grouped-/multi-query attention (kv heads divide heads)")
    num_heads: Expression
    num_kv_heads: Expression
    head_dim: Expression
    qkv_bias: Expression = False
    o_bias: Expression = False
    scale: Expression | None = Field(default=None, description="softmax scale; default head_dim ** -0.5")
    rope: RopeSpec
    kv_cache: KVCacheSpec


class MLPSpec(_Strict):
    name: str = Field(description="module / checkpoint name, e.g. mlp")
    kind: Literal["gated"] = Field(description="gated: down(act(gate(x)) * up(x)) (SwiGLU)")
    activation: Literal["silu", "gelu_tanh"]
    intermediate_size: Expression
    bias: Expression = False


class BlockSpec(_Strict):
    residual: Literal["pre_norm"] = Field(description="pre_norm: x + f(norm(x)) around each sub-layer")
    attention_norm: NormSpec
    attention: AttentionSpec
    mlp_norm: NormSpec
    mlp: MLPSpec


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
class CheckpointSpec(_Strict):
    prefix: str = Field(default="model", description="module prefix of the backbone in HF names (model.layers...)")
    fuse: dict[str, dict[Union[str, int], str]] = Field(
        default_factory=dict,
        description="fused parameter -> {shard id: checkpoint module}, e.g. qkv_proj: {q: q_proj, k: k_proj, v: v_proj}",
    )
    ignore: list[str] = Field(default_factory=list, description="checkpoint keys dropped on purpose (* = any segment)")
    rename: dict[str, str] = Field(
        default_factory=dict, description="suffix renames applied to checkpoint keys (weight_scale_inv: weight_scale)"
    )

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
    layers: LayersSpec
    blocks: Annotated[dict[str, BlockSpec], Field(min_length=1)]
    embedding: EmbeddingSpec
    final_norm: NormSpec
    lm_head: LMHeadSpec = LMHeadSpec()
    checkpoint: CheckpointSpec = CheckpointSpec()
