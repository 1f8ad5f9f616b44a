"""The lowered model: everything templates need, already checked, with expressions rendered to Python source.

Expression fields hold Python source over ``config.<field>`` (e.g. ``"config.num_attention_heads"``), so templates
never see spec syntax and the generated code never reads a spec.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ConfigValue:
    """A field of the generated config class: read from config.json, or derived from other fields."""

    name: str
    py_type: str  # annotation in the generated dataclass
    kind: str  # "read" | "derived"
    reader: str = ""  # runtime.hf_config reader name for kind == "read": read_int / read_float / ...
    keys: tuple[str, ...] = ()  # config.json keys tried in order (dotted = nested)
    required: bool = False
    nullable: bool = False
    default_src: str | None = None  # Python source over already-computed locals
    doc: str = ""


@dataclass(frozen=True)
class Norm:
    name: str
    kind: str
    eps: str


@dataclass(frozen=True)
class Rope:
    style: str
    theta: str
    scaling: str
    max_position: str
    partial_factor: str


@dataclass(frozen=True)
class Attention:
    name: str
    kind: str
    num_heads: str
    num_kv_heads: str
    head_dim: str
    qkv_bias: str
    o_bias: str
    scale: str  # "" = head_dim ** -0.5
    rope: Rope
    kv_cache_kind: str


@dataclass(frozen=True)
class MLP:
    name: str
    kind: str
    activation: str
    intermediate_size: str
    bias: str


@dataclass(frozen=True)
class Block:
    key: str  # block name in the spec
    class_name: str  # e.g. LlamaDecoderLayer
    attention_class: str  # e.g. LlamaAttention
    mlp_class: str  # e.g. LlamaMLP
    residual: str
    attention_norm: Norm
    attention: Attention
    mlp_norm: Norm
    mlp: MLP


@dataclass(frozen=True)
class Fusion:
    param: str  # fused parameter, e.g. qkv_proj
    shards: tuple[tuple[str, str], ...]  # (shard id as Python literal source, checkpoint module)


@dataclass(frozen=True)
class Checkpoint:
    prefix: str
    fusions: tuple[Fusion, ...]
    ignore: tuple[str, ...]
    rename: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ModelIR:
    spec_path: str  # as shown in banners, relative to the repo (specs/llama.yaml)
    source_hash: str  # hash of spec + templates + generator version
    name: str
    class_prefix: str
    description: str
    architectures: tuple[str, ...]
    model_type: str
    modeling: str
    config_values: tuple[ConfigValue, ...]  # topologically ordered
    num_layers: str
    layer_block: str | None  # the single block every layer uses, or None when a rule decides
    layer_block_rule: str | None  # Python source over config fields and `i`
    blocks: tuple[Block, ...]
    embedding_name: str
    vocab_size: str
    hidden_size: str
    final_norm: Norm
    lm_head_name: str
    tie_embeddings: str
    checkpoint: Checkpoint
    spec_text: str = field(default="", repr=False)

    def block(self, key: str) -> Block:
        return next(b for b in self.blocks if b.key == key)
