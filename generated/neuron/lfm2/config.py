# ==================================================================================================================
# GENERATED FROM specs/lfm2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/lfm2.yaml --target neuron
# source hash (spec + templates + generator): 08a06d2c1a1c3232
# ==================================================================================================================
"""Lfm2Config: the HF ``config.json`` fields specs/lfm2.yaml reads, typed, with the spec's defaults.

Serves: Lfm2ForCausalLM (model_type ``lfm2``). Reference: transformers/models/lfm2/modeling_lfm2.py.
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
    read_rope_scaling,
    read_str_list,
    require,
)
from modelgen.runtime.targets.neuron.config import NeuronModelConfig

ARCHITECTURES = ("Lfm2ForCausalLM",)


@dataclass(frozen=True)
class Lfm2Config(NeuronModelConfig):
    # NeuronModelConfig adds the keyword-only ``neuron_config`` field and ``from_configs(hf_config, neuron_config)``
    # (the vLLM Neuron guide's config contract, step 1a).
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    rope_theta: float  # config.json: rope_theta or rope_parameters.rope_theta
    rope_scaling: dict[str, Any] | None  # config.json: rope_parameters or rope_scaling
    tie_word_embeddings: bool
    norm_eps: float
    layer_types: list[str]
    conv_L_cache: int
    conv_bias: bool
    block_auto_adjust_ff_dim: bool
    block_ffn_dim_multiplier: float
    block_multiple_of: int
    ff_adjusted: Any  # derived: int(2 * intermediate_size / 3)
    has_multiplier: Any  # derived: block_ffn_dim_multiplier is not None
    ff_scaled: Any  # derived: int((block_ffn_dim_multiplier or 0) * ff_adjusted)
    ff_rounded: Any  # derived: -(-ff_scaled // block_multiple_of) * block_multiple_of
    ff_auto: Any  # derived: ff_rounded if has_multiplier else ff_adjusted
    ff_dim: Any  # derived: ff_auto if block_auto_adjust_ff_dim else intermediate_size

    # config.json keys read above (dotted = inside a mapping) and keys the spec declares irrelevant (config_ignore);
    # modelgen.runtime.hf_config.check_config_keys reports any other key, which this model would not honour.
    CONFIG_KEYS_READ: ClassVar[tuple[str, ...]] = (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "max_position_embeddings",
        "rope_theta",
        "rope_parameters.rope_theta",
        "rope_parameters",
        "rope_scaling",
        "tie_word_embeddings",
        "norm_eps",
        "layer_types",
        "conv_L_cache",
        "conv_bias",
        "block_auto_adjust_ff_dim",
        "block_ffn_dim_multiplier",
        "block_multiple_of",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "full_attn_idxs",
        "block_dim",
        "block_ff_dim",
        "conv_dim",
        "conv_dim_out",
        "conv_use_xavier_init",
        "block_use_swiglu",
        "block_use_xavier_init",
        "block_norm_eps",
        "block_mlp_init_scale",
        "block_out_init_scale",
        "num_heads",
        "theta",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "Lfm2Config":
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
        max_position_embeddings = read_int(cfg, "max_position_embeddings", ("max_position_embeddings",))
        if max_position_embeddings is None:
            max_position_embeddings = 128000
        rope_theta = read_float(cfg, "rope_theta", ("rope_theta", "rope_parameters.rope_theta"))
        if rope_theta is None:
            rope_theta = 1000000.0
        rope_scaling = read_rope_scaling(cfg, "rope_scaling", ("rope_parameters", "rope_scaling"))
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = True
        norm_eps = read_float(cfg, "norm_eps", ("norm_eps",))
        if norm_eps is None:
            norm_eps = 1e-05
        layer_types = require("layer_types", ("layer_types",), read_str_list(cfg, "layer_types", ("layer_types",)))
        conv_L_cache = read_int(cfg, "conv_L_cache", ("conv_L_cache",))
        if conv_L_cache is None:
            conv_L_cache = 3
        conv_bias = read_bool(cfg, "conv_bias", ("conv_bias",))
        if conv_bias is None:
            conv_bias = False
        block_auto_adjust_ff_dim = read_bool(cfg, "block_auto_adjust_ff_dim", ("block_auto_adjust_ff_dim",))
        if block_auto_adjust_ff_dim is None:
            block_auto_adjust_ff_dim = True
        block_ffn_dim_multiplier = read_float(cfg, "block_ffn_dim_multiplier", ("block_ffn_dim_multiplier",))
        # An explicit null stays None (nullable); only an absent key takes the default.
        if block_ffn_dim_multiplier is None and not any(key in cfg for key in ("block_ffn_dim_multiplier",)):
            block_ffn_dim_multiplier = 1.0
        block_multiple_of = read_int(cfg, "block_multiple_of", ("block_multiple_of",))
        if block_multiple_of is None:
            block_multiple_of = 256
        ff_adjusted = int(2 * intermediate_size / 3)
        has_multiplier = block_ffn_dim_multiplier is not None
        ff_scaled = int((block_ffn_dim_multiplier or 0) * ff_adjusted)
        ff_rounded = -(-ff_scaled // block_multiple_of) * block_multiple_of
        ff_auto = ff_rounded if has_multiplier else ff_adjusted
        ff_dim = ff_auto if block_auto_adjust_ff_dim else intermediate_size
        if not (conv_L_cache >= 2):
            raise ConfigError(
                "specs/lfm2.yaml: conv_L_cache below 2 leaves the short conv no history to keep (a one-tap kernel "
                "is not generated)",
            )
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            max_position_embeddings=max_position_embeddings,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            tie_word_embeddings=tie_word_embeddings,
            norm_eps=norm_eps,
            layer_types=layer_types,
            conv_L_cache=conv_L_cache,
            conv_bias=conv_bias,
            block_auto_adjust_ff_dim=block_auto_adjust_ff_dim,
            block_ffn_dim_multiplier=block_ffn_dim_multiplier,
            block_multiple_of=block_multiple_of,
            ff_adjusted=ff_adjusted,
            has_multiplier=has_multiplier,
            ff_scaled=ff_scaled,
            ff_rounded=ff_rounded,
            ff_auto=ff_auto,
            ff_dim=ff_dim,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return 'conv' if self.layer_types[i] == 'conv' else 'attention'
