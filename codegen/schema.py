"""The spec language, as strict pydantic v2 models.

A spec has one section per concern, in the order a reviewer checks it against the HF files:
  ``hf``          which ``architectures`` / ``model_type`` it serves and which modeling file is the reference;
  ``config``      the HF ``config.json`` fields the model reads (type, default, alternative spellings);
  ``derived``     values computed from them with the safe expression language (codegen/expr.py);
  ``layers``      how many layers and which block each one uses (a name, or a rule over the layer index ``i``);
  ``decoder``     what every block shares unless it overrides it: the residual style and the two norms;
  ``blocks``      each block: norms, an attention and an MLP, each of a kind from codegen/blocks/ (``kind:`` picks);
  ``embedding`` / ``final_norm`` / ``lm_head``;
  ``checkpoint``  HF tensor names -> parameters: fusions with shard ids, ignored keys, renames.

Every model forbids unknown keys; names and checkpoint patterns are validated (codegen/spec_types.py);
:func:`modelgen.codegen.lower.load_spec` turns pydantic's errors into ``file:line:col``.
Expression-valued fields are plain strings/numbers here and are parsed and checked in lowering.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator, model_validator

from .blocks import specs_for
from .mtp import MTPSpec
from .checkpoint_split import SplitSpec
from .spec_types import (
    ConfigKey,
    ExpertPattern,
    Expression,
    Identifier,
    KeyPattern,
    NormSpec,
    RenameFrom,
    RenameTo,
    Strict,
    TensorName,
)


# ----------------------------------------------------------------------------------------------------------------- hf
class HFSection(Strict):
    architectures: list[Identifier] = Field(
        min_length=1, description="config.json `architectures` values this spec serves"
    )
    model_type: str = Field(description="config.json `model_type`")
    modeling: str = Field(description="the transformers modeling file this spec is checked against")


# ------------------------------------------------------------------------------------------------------------- config
FieldType = Literal["int", "float", "bool", "str", "rope_scaling", "int_list", "str_list"]


class ConfigField(Strict):
    """One HF config.json field the model reads."""

    type: FieldType
    default: Expression | None = Field(
        default=None, description="literal or expression over other fields; absent = the field is required"
    )
    required: bool = Field(default=False, description="derived: true when no default is given")
    nullable: bool = Field(default=False, description="null is a legal value (otherwise null means 'use the default')")
    read: list[ConfigKey] | None = Field(
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
def _kind_union(slot: str) -> Any:
    """The spec models of every registered kind for ``slot``, told apart by their ``kind:`` key."""
    models = specs_for(slot)
    if len(models) == 1:
        return models[0]
    return Annotated[Union[models], Field(discriminator="kind")]  # type: ignore[valid-type]


AttentionSpec = _kind_union("attention")
MLPSpec = _kind_union("mlp")
Residual = Literal["pre_norm"]


class DecoderSpec(Strict):
    """Defaults every block inherits (a block may override them; the decoder class needs them equal)."""

    residual: Residual | None = Field(default=None, description="pre_norm: x + f(norm(x)) around each sub-layer")
    attention_norm: NormSpec | None = None
    mlp_norm: NormSpec | None = None


class BlockSpec(Strict):
    residual: Residual | None = Field(default=None, description="pre_norm (default: decoder.residual)")
    attention_norm: NormSpec | None = Field(default=None, description="default: decoder.attention_norm")
    attention: AttentionSpec  # type: ignore[valid-type]
    mlp_norm: NormSpec | None = Field(default=None, description="default: decoder.mlp_norm")
    mlp: MLPSpec  # type: ignore[valid-type]


class LayersSpec(Strict):
    count: Expression
    block: Identifier | None = Field(default=None, description="the block every layer uses")
    block_rule: Expression | None = Field(
        default=None, description="expression over the layer index `i` and config fields giving a block name"
    )

    @model_validator(mode="after")
    def _one_of(self) -> "LayersSpec":
        if (self.block is None) == (self.block_rule is None):
            raise ValueError("give exactly one of `block` or `block_rule`")
        return self


class EmbeddingSpec(Strict):
    name: Identifier = "embed_tokens"
    vocab_size: Expression = Field(description="rows of the embedding / LM head")
    hidden_size: Expression = Field(description="model width (residual stream)")


class LMHeadSpec(Strict):
    name: Identifier = "lm_head"
    tie: Expression = Field(default=False, description="share the embedding weight (tie_word_embeddings)")


# --------------------------------------------------------------------------------------------------------- checkpoint
class ExpertCheckpointSpec(Strict):
    """Checkpoint names of routed experts, relative to the MoE module; ``{e}`` is the expert index.

    Both layouts load into the stacked ``w13`` ``[E, 2I, H]`` (gate then up) and ``w2`` ``[E, H, I]`` parameters.
    """

    per_expert: dict[Literal["gate", "up", "down"], ExpertPattern] = Field(
        description="e.g. {gate: experts.{e}.gate_proj.weight, up: experts.{e}.up_proj.weight, down: ...}"
    )
    fused: dict[Literal["gate_up", "down"], TensorName] | None = Field(
        default=None, description="transformers v5 fused names: gate_up_proj [E, 2I, H], down_proj [E, H, I]"
    )


class Requirement(Strict):
    check: Expression = Field(description="expression over config fields that must be true")
    message: str


class CheckpointSpec(Strict):
    prefix: Identifier = Field(default="model", description="module prefix of the backbone in HF names (model.layers...)")
    fuse: dict[Identifier, dict[Union[Identifier, int], TensorName]] = Field(
        default_factory=dict,
        description="fused parameter -> {shard id: checkpoint module}, e.g. qkv_proj: {q: q_proj, k: k_proj, v: v_proj}",
    )
    ignore: list[KeyPattern] = Field(default_factory=list, description="checkpoint keys dropped on purpose (* = any segment)")
    rename: dict[RenameFrom, RenameTo] = Field(
        default_factory=dict,
        description="substring renames applied to checkpoint keys (weight_scale_inv: weight_scale, .block_sparse_moe.: .mlp.)",
    )
    experts: ExpertCheckpointSpec | None = None
    split: dict[Identifier, SplitSpec] = Field(
        default_factory=dict,
        description="checkpoint module stored already fused -> its parts (the reverse of fuse; Phi-3), e.g. "
        "qkv_proj: {parts: {q_proj: num_attention_heads * head_dim, k_proj: ..., v_proj: ...}}",
    )

    @field_validator("fuse")
    @classmethod
    def _shard_ids(cls, v: dict[str, dict[Any, str]]) -> dict[str, dict[Any, str]]:
        for param, shards in v.items():
            if len(shards) < 2:
                raise ValueError(f"fusion '{param}' needs at least two checkpoint modules")
        return v


# ---------------------------------------------------------------------------------------------------------------- top
class Spec(Strict):
    name: Identifier = Field(pattern=r"^[a-z][a-z0-9_]*$", description="python package name of the generated model")
    class_prefix: Identifier = Field(pattern=r"^[A-Z][A-Za-z0-9]*$", description="class name prefix, e.g. Llama")
    description: str
    hf: HFSection
    config: dict[Identifier, ConfigField]
    config_ignore: list[ConfigKey] = Field(
        default_factory=list,
        description="config.json keys this architecture's checkpoints carry that do not change the forward pass, "
        "beyond the project-wide generic set (runtime/hf_config.py GENERIC_CONFIG_KEYS); any other key the spec does "
        "not read is warned about at run (an error with --strict-config), e.g. [pretraining_tp, max_window_layers]",
    )
    derived: dict[Identifier, Expression] = Field(default_factory=dict)
    requires: list[Requirement] = Field(
        default_factory=list, description="config checks the generated from_hf_config enforces (unsupported features)"
    )
    layers: LayersSpec
    decoder: DecoderSpec = DecoderSpec()
    blocks: Annotated[dict[Identifier, BlockSpec], Field(min_length=1)]
    embedding: EmbeddingSpec
    final_norm: NormSpec
    lm_head: LMHeadSpec = LMHeadSpec()
    checkpoint: CheckpointSpec = CheckpointSpec()
    mtp: MTPSpec | None = Field(default=None, description="the checkpoint's multi-token-prediction draft head (codegen/mtp.py)")
