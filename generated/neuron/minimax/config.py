# ==================================================================================================================
# GENERATED FROM specs/minimax.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/minimax.yaml --target neuron
# source hash (spec + templates + generator): 8eb40ba1c52fdebf
# ==================================================================================================================
"""MiniMaxConfig: the HF ``config.json`` fields specs/minimax.yaml reads, typed, with the spec's defaults.

Serves: MiniMaxForCausalLM (model_type ``minimax``). Reference: transformers/models/minimax/modeling_minimax.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from modelgen.runtime.hf_config import (
    ConfigError,
    as_dict,
    read_bool,
    read_float,
    read_int,
    read_int_list,
    read_rope_scaling,
    read_str,
    read_str_list,
    require,
)
from modelgen.runtime.targets.neuron.config import NeuronModelConfig

ARCHITECTURES = ("MiniMaxForCausalLM",)


@dataclass(frozen=True)
class MiniMaxConfig(NeuronModelConfig):
    # NeuronModelConfig adds the keyword-only ``neuron_config`` field and ``from_configs(hf_config, neuron_config)``
    # (the vLLM Neuron guide's config contract, step 1a).
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float  # config.json: rope_theta or rope_parameters.rope_theta
    rope_scaling: dict[str, Any] | None  # config.json: rope_parameters or rope_scaling
    tie_word_embeddings: bool
    hidden_act: str
    num_local_experts: int
    num_experts_per_tok: int
    sliding_window: int
    layer_types: list[str]
    attn_type_list: list[int]
    block_size: int
    rotary_dim: int
    full_attn_alpha_factor: float  # config.json: full_attn_alpha_factor or layernorm_full_attention_alpha
    full_attn_beta_factor: float  # config.json: full_attn_beta_factor or layernorm_full_attention_beta
    linear_attn_alpha_factor: float  # config.json: linear_attn_alpha_factor or layernorm_linear_attention_alpha
    linear_attn_beta_factor: float  # config.json: linear_attn_beta_factor or layernorm_linear_attention_beta
    mlp_alpha_factor: float  # config.json: mlp_alpha_factor or layernorm_mlp_alpha
    mlp_beta_factor: float  # config.json: mlp_beta_factor or layernorm_mlp_beta
    rope_fraction: Any  # derived: (rotary_dim if rotary_dim is not None else head_dim) / head_dim

    # config.json keys read above (dotted = inside a mapping) and keys the spec declares irrelevant (config_ignore);
    # modelgen.runtime.hf_config.check_config_keys reports any other key, which this model would not honour.
    CONFIG_KEYS_READ: ClassVar[tuple[str, ...]] = (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "rms_norm_eps",
        "rope_theta",
        "rope_parameters.rope_theta",
        "rope_parameters",
        "rope_scaling",
        "tie_word_embeddings",
        "hidden_act",
        "num_local_experts",
        "num_experts_per_tok",
        "sliding_window",
        "layer_types",
        "attn_type_list",
        "block_size",
        "rotary_dim",
        "full_attn_alpha_factor",
        "layernorm_full_attention_alpha",
        "full_attn_beta_factor",
        "layernorm_full_attention_beta",
        "linear_attn_alpha_factor",
        "layernorm_linear_attention_alpha",
        "linear_attn_beta_factor",
        "layernorm_linear_attention_beta",
        "mlp_alpha_factor",
        "layernorm_mlp_alpha",
        "mlp_beta_factor",
        "layernorm_mlp_beta",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "router_jitter_noise",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "MiniMaxConfig":
        """Build from a parsed ``config.json`` dict or a transformers ``PretrainedConfig``."""
        cfg = as_dict(hf_config)
        vocab_size = require("vocab_size", ("vocab_size",), read_int(cfg, "vocab_size", ("vocab_size",)))
        hidden_size = require("hidden_size", ("hidden_size",), read_int(cfg, "hidden_size", ("hidden_size",)))
        intermediate_size = require(
            "intermediate_size", ("intermediate_size",), read_int(cfg, "intermediate_size", ("intermediate_size",))
        )
        num_hidden_layers = require(
            "num_hidden_layers", ("num_hidden_layers",), read_int(cfg, "num_hidden_layers", ("num_hidden_layers",))
        )
        num_attention_heads = require(
            "num_attention_heads",
            ("num_attention_heads",),
            read_int(cfg, "num_attention_heads", ("num_attention_heads",)),
        )
        num_key_value_heads = read_int(cfg, "num_key_value_heads", ("num_key_value_heads",))
        if num_key_value_heads is None:
            num_key_value_heads = num_attention_heads
        head_dim = read_int(cfg, "head_dim", ("head_dim",))
        if head_dim is None:
            head_dim = hidden_size // num_attention_heads
        max_position_embeddings = read_int(cfg, "max_position_embeddings", ("max_position_embeddings",))
        if max_position_embeddings is None:
            max_position_embeddings = 131072
        rms_norm_eps = read_float(cfg, "rms_norm_eps", ("rms_norm_eps",))
        if rms_norm_eps is None:
            rms_norm_eps = 1e-05
        rope_theta = read_float(cfg, "rope_theta", ("rope_theta", "rope_parameters.rope_theta"))
        if rope_theta is None:
            rope_theta = 1000000.0
        rope_scaling = read_rope_scaling(cfg, "rope_scaling", ("rope_parameters", "rope_scaling"))
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = False
        hidden_act = read_str(cfg, "hidden_act", ("hidden_act",))
        if hidden_act is None:
            hidden_act = "silu"
        num_local_experts = read_int(cfg, "num_local_experts", ("num_local_experts",))
        if num_local_experts is None:
            num_local_experts = 8
        num_experts_per_tok = read_int(cfg, "num_experts_per_tok", ("num_experts_per_tok",))
        if num_experts_per_tok is None:
            num_experts_per_tok = 2
        sliding_window = read_int(cfg, "sliding_window", ("sliding_window",))
        layer_types = read_str_list(cfg, "layer_types", ("layer_types",))
        attn_type_list = read_int_list(cfg, "attn_type_list", ("attn_type_list",))
        block_size = read_int(cfg, "block_size", ("block_size",))
        if block_size is None:
            block_size = 256
        rotary_dim = read_int(cfg, "rotary_dim", ("rotary_dim",))
        full_attn_alpha_factor = read_float(
            cfg, "full_attn_alpha_factor", ("full_attn_alpha_factor", "layernorm_full_attention_alpha")
        )
        if full_attn_alpha_factor is None:
            full_attn_alpha_factor = 1.0
        full_attn_beta_factor = read_float(
            cfg, "full_attn_beta_factor", ("full_attn_beta_factor", "layernorm_full_attention_beta")
        )
        if full_attn_beta_factor is None:
            full_attn_beta_factor = 1.0
        linear_attn_alpha_factor = read_float(
            cfg, "linear_attn_alpha_factor", ("linear_attn_alpha_factor", "layernorm_linear_attention_alpha")
        )
        if linear_attn_alpha_factor is None:
            linear_attn_alpha_factor = 1.0
        linear_attn_beta_factor = read_float(
            cfg, "linear_attn_beta_factor", ("linear_attn_beta_factor", "layernorm_linear_attention_beta")
        )
        if linear_attn_beta_factor is None:
            linear_attn_beta_factor = 1.0
        mlp_alpha_factor = read_float(cfg, "mlp_alpha_factor", ("mlp_alpha_factor", "layernorm_mlp_alpha"))
        if mlp_alpha_factor is None:
            mlp_alpha_factor = 1.0
        mlp_beta_factor = read_float(cfg, "mlp_beta_factor", ("mlp_beta_factor", "layernorm_mlp_beta"))
        if mlp_beta_factor is None:
            mlp_beta_factor = 1.0
        rope_fraction = (rotary_dim if rotary_dim is not None else head_dim) / head_dim
        if not (hidden_act == 'silu'):
            raise ConfigError(
                "specs/minimax.yaml: hidden_act other than silu (the MoE experts' and the lightning qkv activation) "
                "is not generated",
            )
        if not (rotary_dim is None or (0 < rotary_dim <= head_dim and rotary_dim % 2 == 0)):
            raise ConfigError("specs/minimax.yaml: rotary_dim must be an even number of dims in (0, head_dim]")
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            head_dim=head_dim,
            max_position_embeddings=max_position_embeddings,
            rms_norm_eps=rms_norm_eps,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            tie_word_embeddings=tie_word_embeddings,
            hidden_act=hidden_act,
            num_local_experts=num_local_experts,
            num_experts_per_tok=num_experts_per_tok,
            sliding_window=sliding_window,
            layer_types=layer_types,
            attn_type_list=attn_type_list,
            block_size=block_size,
            rotary_dim=rotary_dim,
            full_attn_alpha_factor=full_attn_alpha_factor,
            full_attn_beta_factor=full_attn_beta_factor,
            linear_attn_alpha_factor=linear_attn_alpha_factor,
            linear_attn_beta_factor=linear_attn_beta_factor,
            mlp_alpha_factor=mlp_alpha_factor,
            mlp_beta_factor=mlp_beta_factor,
            rope_fraction=rope_fraction,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return (
            'linear'
            if (
                self.layer_types[i] == 'linear_attention'
                if self.layer_types is not None
                else (self.attn_type_list[i] == 0 if self.attn_type_list is not None else i % 2 == 1)
            )
            else 'full'
        )
