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
class QKNorm:
    kind: str
    eps: str
    enabled: str  # Python source; "True" when always on
    q_name: str
    k_name: str


@dataclass(frozen=True)
class Attention:
    class_name: str
    name: str
    kind: str
    num_heads: str
    num_kv_heads: str
    head_dim: str
    qkv_bias: str
    o_bias: str
    scale: str  # "" = head_dim ** -0.5
    qk_norm: QKNorm | None
    rope: Rope
    kv_cache_kind: str


@dataclass(frozen=True)
class MLP:
    """Gated MLP; the class takes its intermediate width at construction (dense layers and shared experts)."""

    class_name: str
    name: str
    kind: str  # "gated"
    activation: str
    intermediate_size: str
    bias: str


@dataclass(frozen=True)
class Router:
    name: str
    scoring: str
    top_k: str
    renormalize: str
    n_group: str  # "None" when not grouped
    topk_group: str
    correction_bias: bool
    routed_scaling_factor: str
    float32: bool
    weights_in_model_dtype: bool


@dataclass(frozen=True)
class SharedExperts:
    name: str
    count: str
    intermediate_size: str
    fuse: bool


@dataclass(frozen=True)
class MoE:
    class_name: str
    name: str
    kind: str  # "moe"
    num_experts: str
    intermediate_size: str
    activation: str
    router: Router
    shared: SharedExperts | None
    experts_name: str
    mlp_class: str  # gated MLP class used by the shared experts


@dataclass(frozen=True)
class Block:
    key: str  # block name in the spec
    residual: str
    attention_norm: Norm
    attention: Attention
    mlp_norm: Norm
    mlp: MLP | MoE


@dataclass(frozen=True)
class Fusion:
    param: str  # fused parameter, e.g. qkv_proj
    shards: tuple[tuple[str, str], ...]  # (shard id as Python literal source, checkpoint module)


@dataclass(frozen=True)
class Experts:
    per_expert: tuple[tuple[str, str], ...]  # (gate|up|down, pattern with {e}) relative to the MoE module
    fused: tuple[tuple[str, str], ...]  # (gate_up|down, name) relative to the MoE module; () when absent


@dataclass(frozen=True)
class Checkpoint:
    prefix: str
    fusions: tuple[Fusion, ...]
    ignore: tuple[str, ...]
    rename: tuple[tuple[str, str], ...]
    experts: Experts | None


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
    attentions: tuple[Attention, ...]  # distinct attention classes, in first-use order
    mlps: tuple[MLP | MoE, ...]  # distinct MLP / MoE classes (gated first: MoE uses it for shared experts)
    decoder_class: str
    requires: tuple[tuple[str, str], ...]  # (Python source over config fields, message)
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

    @property
    def moe(self) -> MoE | None:
        return next((m for m in self.mlps if isinstance(m, MoE)), None)
