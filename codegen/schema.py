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
:func:`modelgen.codegen.spec_file.load_spec` turns pydantic's errors into ``file:line:col``.
Expression-valued fields are plain strings/numbers here and are parsed and checked in lowering.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator, model_validator

from .blocks import specs_for
from .checkpoint_split import SplitSpec
from .mtp import MTPSpec
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
FieldType = Literal["int", "float", "bool", "str", "rope_scaling", "int_list", "str_list", "float_list"]


class ConfigField(Strict):
    """One HF config.json field the model reads."""

    type: FieldType = Field(
        description="int, float, bool, str, rope_scaling (the rope_scaling / rope_parameters dict), int_list, "
        "str_list or float_list (numbers, Infinity allowed: Mamba-2's time_step_limit); `hidden_size: int` is "
        "shorthand for a required int",
    )
    default: Expression | None = Field(
        default=None, description="literal or expression over other fields; absent = the field is required"
    )
    required: bool = Field(default=False, description="derived: true when no default is given")
    nullable: bool = Field(default=False, description="null is a legal value (otherwise null means 'use the default')")
    read: list[ConfigKey] | None = Field(
        default=None,
        description="config keys tried in order (dotted = nested, e.g. rope_parameters.rope_theta); default: the field name",
    )
    doc: str | None = Field(default=None, description="free text for the generated README (escaped)")

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
SharedSpec = _kind_union("shared")
Residual = Literal["pre_norm", "sandwich", "post_norm"]
RESIDUAL_DOC = (
    "pre_norm: x + f(norm(x)) around each sub-layer (attention_norm, mlp_norm; Llama); sandwich: x + "
    "post_norm(f(pre_norm(x))) (all four norms; Gemma 2/3); post_norm: x + post_norm(f(x)) (attention_post_norm, "
    "mlp_post_norm only; OLMo 2)"
)


class SubLayerScaleSpec(Strict):
    """One sub-layer's join with the residual stream: ``out = stream * residual + f(norm(x)) * output``."""

    residual: Expression = Field(default=1, description="factor on the residual stream (MiniMax *_alpha_factor)")
    output: Expression = Field(
        default=1, description="factor on the sub-layer's output (MiniMax *_beta_factor, a muP output multiplier)"
    )


class ResidualScaleSpec(Strict):
    """Residual-side scaling of a pre-norm layer (MiniMax ``layernorm_*_alpha/beta``; muP multipliers): each join is
    ``stream * residual + f(norm(stream)) * output``; blocks may set different factors (the layer picks its block's)."""

    stream: Literal["input", "normed"] = Field(
        default="input", description="what the residual stream carries past each norm: input, the norm's input x "
        "(Llama); normed, the norm's output (MiniMax: residual = input_layernorm(x))",
    )
    attention: SubLayerScaleSpec = Field(default_factory=SubLayerScaleSpec, description="the attention's join")
    mlp: SubLayerScaleSpec = Field(default_factory=SubLayerScaleSpec, description="the MLP's join")


class MixerFactorsSpec(Strict):
    """One token mixer's factors in a block with a parallel mixer: ``f(x * input) * output``."""

    input: Expression = Field(default=1, description="factor on the mixer's input, the normed stream (Falcon-H1 "
                              "attention_in_multiplier / ssm_in_multiplier)")
    output: Expression = Field(default=1, description="factor on the mixer's output before the two are summed "
                               "(Falcon-H1 attention_out_multiplier / ssm_out_multiplier)")


class MixerScaleSpec(Strict):
    """muP factors of the two mixers of a block with ``parallel_mixer``: ``out = attention(n * a_in) * a_out +
    parallel_mixer(n * p_in) * p_out`` with ``n = attention_norm(x)`` (FalconH1DecoderLayer)."""

    attention: MixerFactorsSpec = Field(default_factory=MixerFactorsSpec, description="the attention's factors")
    parallel_mixer: MixerFactorsSpec = Field(
        default_factory=MixerFactorsSpec, description="the parallel mixer's factors"
    )


class _LayerParts(Strict):
    """The residual layout of a decoder layer and its norms (shared by ``decoder:`` and each block)."""

    residual: Residual | None = Field(default=None, description=RESIDUAL_DOC)
    attention_norm: NormSpec | None = Field(default=None, description="norm of the attention input (input_layernorm)")
    attention_post_norm: NormSpec | None = Field(
        default=None, description="norm of the attention output before the residual add (sandwich / post_norm; "
        "Gemma 2 and OLMo 2 call it post_attention_layernorm)",
    )
    mlp_norm: NormSpec | None = Field(
        default=None, description="norm of the MLP input (Llama post_attention_layernorm, Gemma 2 "
        "pre_feedforward_layernorm)",
    )
    mlp_post_norm: NormSpec | None = Field(
        default=None, description="norm of the MLP output before the residual add (post_feedforward_layernorm)"
    )
    parallel: Expression | None = Field(
        default=None, description="pre_norm only; expression: attention and MLP both read attention_norm(x) and "
        "out = x + attn + mlp, no mlp_norm built when true (StableLM use_parallel_residual, GPT-NeoX); a literal "
        "true needs no mlp_norm (Cohere), a config expression does (the serial case uses it); default false",
    )
    residual_multiplier: Expression | None = Field(
        default=None, description="each sub-layer's output times this before the residual add (Granite "
        "residual_multiplier)",
    )
    residual_scale: ResidualScaleSpec | None = Field(
        default=None, description="pre_norm only: factors on the residual stream and on each sub-layer's output, and "
        "whether the stream continues from the norm's output (MiniMax); may differ between blocks",
    )
    parallel_mlp_norm: Expression | None = Field(
        default=None, description="with parallel: the MLP reads mlp_norm(x) instead of attention_norm(x), each "
        "sub-layer with its own norm (GPT-NeoX post_attention_layernorm, Falcon-40B ln_mlp); expression, default "
        "false; the mlp_norm is then built whenever this is true",
    )


class DecoderSpec(_LayerParts):
    """Defaults every block inherits (a block may override them; the decoder class needs them equal)."""


class BlockSpec(_LayerParts):
    """A block: its attention and MLP, plus any layout field that overrides ``decoder:``."""

    attention: AttentionSpec | None = Field(  # type: ignore[valid-type]
        default=None,
        description="the token mixer, by `kind:` (gqa, mla, gated_deltanet, short_conv, mamba2), e.g. {name: "
        "self_attn, kind: gqa, ...}; left out: a block whose only sub-layer is its mlp (Nemotron-H's MLP and MoE "
        "blocks: out = x + mlp(attention_norm(x)))",
    )
    mlp: MLPSpec | None = Field(  # type: ignore[valid-type]
        default=None,
        description="the feed-forward, by `kind:` (gated, ungated, moe), e.g. {name: mlp, kind: gated, activation: silu, "
        "intermediate_size: intermediate_size}; left out: a block whose only sub-layer is the token mixer "
        "(Mamba2Block: out = x + mixer(attention_norm(x)); residual pre_norm, no mlp_norm)",
    )

    shared: SharedSpec | None = Field(  # type: ignore[valid-type]
        default=None,
        description="a block whose weights several layers share, run before this block's mixer (kind shared_block; "
        "Zamba2's shared_transformer): t = output_proj(shared(concat(x, embeddings))), the mixer reads "
        "attention_norm(x + t), the residual stays x; a one-sub-layer pre_norm block with a mixer only",
    )
    parallel_mixer: AttentionSpec | None = Field(  # type: ignore[valid-type]
        default=None,
        description="a second token mixer, by `kind:`, run on the same attention_norm(x) as the attention; the two "
        "outputs are summed before the residual add (Falcon-H1: every layer's Mamba-2 mixer beside its GQA "
        "attention), e.g. {name: mamba, kind: mamba2, ...}; its state / KV cache is declared beside the "
        "attention's",
    )
    mixer_scale: MixerScaleSpec | None = Field(
        default=None, description="with parallel_mixer: input and output factors of each of the two mixers "
        "(Falcon-H1 attention_in/out_multiplier, ssm_in/out_multiplier)",
    )

    @model_validator(mode="after")
    def _a_sub_layer(self) -> "BlockSpec":
        if self.attention is None and self.mlp is None:
            raise ValueError("a block needs an attention (token mixer), an mlp, or both")
        if self.parallel_mixer is not None and (self.attention is None or self.mlp is None):
            raise ValueError("parallel_mixer needs an attention (it runs beside it) and an mlp")
        if self.mixer_scale is not None and self.parallel_mixer is None:
            raise ValueError("mixer_scale needs a parallel_mixer (the factors of the two mixers)")
        return self


class LayersSpec(Strict):
    count: Expression = Field(description="number of decoder layers, usually num_hidden_layers")
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
    name: Identifier = Field(default="embed_tokens", description="module / checkpoint name of the embedding")
    vocab_size: Expression = Field(description="rows of the embedding / LM head")
    hidden_size: Expression = Field(description="model width (residual stream)")
    multiplier: Expression | None = Field(
        default=None, description="embeddings times this (Gemma hidden_size ** 0.5, Granite embedding_multiplier)"
    )
    multiplier_dtype: Literal["float32", "model"] = Field(
        default="float32", description="model: the multiplier is first rounded to the model dtype, as Gemma's "
        "normalizer tensor is (torch.tensor(sqrt(hidden)).to(dtype)); float32: a Python float (Granite)",
    )


class LMHeadSpec(Strict):
    name: Identifier = Field(default="lm_head", description="module / checkpoint name of the output projection")
    tie: Expression = Field(default=False, description="share the embedding weight (tie_word_embeddings)")
    divide_by: Expression | None = Field(default=None, description="logits / this (Granite logits_scaling)")
    bias: bool = Field(default=False, description="the LM head has a bias `<name>.bias [vocab]` (Phi-2)")
    softcap: Expression | None = Field(
        default=None, description="logits -> cap * tanh(logits / cap); an expression that evaluates to None: off "
        "(Gemma 2 final_logit_softcapping)",
    )


# --------------------------------------------------------------------------------------------------------- checkpoint
class ExpertCheckpointSpec(Strict):
    """Checkpoint names of routed experts, relative to the MoE module; ``{e}`` is the expert index.

    Both layouts load into the stacked ``w13`` ``[E, 2I, H]`` (gate then up) and ``w2`` ``[E, H, I]`` parameters.
    """

    per_expert: dict[Literal["gate", "up", "down"], ExpertPattern] = Field(
        default_factory=dict,
        description="e.g. {gate: experts.{e}.gate_proj.weight, up: experts.{e}.up_proj.weight, down: ...}; may be "
        "left out when the family's checkpoints only ever store fused experts (GraniteMoE input_linear)",
    )
    fused: dict[Literal["gate_up", "down", "gate", "up"], TensorName] | None = Field(
        default=None, description="transformers v5 fused names: gate_up_proj [E, 2I, H], down_proj [E, H, I]; or "
        "gate, up and down each one tensor of every expert (DBRX ffn.experts.mlp.w1 / v1 / w2, moe expert_layout "
        "flat)",
    )


class Requirement(Strict):
    check: Expression = Field(
        description="expression over config fields that must be true, e.g. `not use_sliding_window`",
    )
    message: str = Field(description="the one-line error when it is not, naming the field and what is unsupported")


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
    experts: ExpertCheckpointSpec | None = Field(
        default=None, description="checkpoint names of routed experts (needed by an moe block): per_expert patterns "
        "with {e}, transformers v5 fused names",
    )
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
    description: str = Field(
        description="one line shown in generated READMEs and `modelgen list`, e.g. 'Dense decoder with GQA, RoPE and "
        "a SwiGLU MLP'",
    )
    hf: HFSection = Field(
        description="which config.json `architectures`/`model_type` this spec serves and the transformers modeling "
        "file it is checked against",
    )
    config: dict[Identifier, ConfigField] = Field(
        description="the config.json fields the model reads, by name: `vocab_size: int` (required) or `rms_norm_eps: "
        "{type: float, default: 1.0e-6}`; a field read under other keys lists them in `read:`"
    )
    config_ignore: list[ConfigKey] = Field(
        default_factory=list,
        description="config.json keys this architecture's checkpoints carry that do not change the forward pass, "
        "beyond the project-wide generic set (runtime/hf_config.py GENERIC_CONFIG_KEYS); any other key the spec does "
        "not read is warned about at run (an error with --strict-config), e.g. [pretraining_tp, max_window_layers]; "
        "never inherited through `extends:` (list the keys that mean nothing to this family)",
    )
    derived: dict[Identifier, Expression] = Field(
        default_factory=dict,
        description="values computed from config fields (safe expressions), e.g. `qk_head_dim: qk_nope_head_dim + "
        "qk_rope_head_dim`",
    )
    requires: list[Requirement] = Field(
        default_factory=list, description="config checks the generated from_hf_config enforces (unsupported features)"
    )
    layers: LayersSpec = Field(description="how many decoder layers (num_hidden_layers) and which block each one uses")
    decoder: DecoderSpec = DecoderSpec()
    blocks: Annotated[dict[Identifier, BlockSpec], Field(
        min_length=1,
        description="the decoder-layer kinds by name (`decoder`, or `dense`/`sparse`, `linear`/`full`): each an "
        "attention and an MLP of a block kind (`kind:`)",
    )]
    embedding: EmbeddingSpec = Field(description="the token embedding (embed_tokens: vocab_size x hidden_size)")
    final_norm: NormSpec = Field(
        description="the norm after the last layer, e.g. {name: norm, kind: rms, eps: rms_norm_eps}",
    )
    lm_head: LMHeadSpec = Field(
        default=LMHeadSpec(), description="the output projection to the vocabulary (lm_head; tied to the embedding "
        "when tie_word_embeddings)",
    )
    checkpoint: CheckpointSpec = Field(
        default=CheckpointSpec(), description="how HF checkpoint tensor names map to parameters: prefix, fusions with "
        "shard ids, ignored keys, renames, expert names",
    )
    mtp: MTPSpec | None = Field(default=None, description="the checkpoint's multi-token-prediction draft head (codegen/mtp.py)")
