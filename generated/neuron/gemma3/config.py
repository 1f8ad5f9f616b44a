# ==================================================================================================================
# GENERATED FROM specs/gemma3.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/gemma3.yaml --target neuron
# source hash (spec + templates + generator): 2e05c38a053c1cea
# ==================================================================================================================
"""Gemma3Config: the HF ``config.json`` fields specs/gemma3.yaml reads, typed, with the spec's defaults.

Serves: Gemma3ForCausalLM, Gemma3ForConditionalGeneration (model_type ``gemma3_text``). Reference:
transformers/models/gemma3/modeling_gemma3.py.
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
    read_str,
    read_str_list,
    require,
)
from modelgen.runtime.targets.neuron.config import NeuronModelConfig

ARCHITECTURES = ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration")


@dataclass(frozen=True)
class Gemma3Config(NeuronModelConfig):
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
    rope_theta: float  # config.json: rope_parameters.full_attention.rope_theta or rope_theta
    rope_scaling: dict[str, Any] | None  # config.json: rope_parameters.full_attention or rope_scaling
    attention_bias: bool
    tie_word_embeddings: bool
    hidden_act: str
    hidden_activation: str
    query_pre_attn_scalar: float
    sliding_window: int
    layer_types: list[str]
    attn_logit_softcapping: float
    final_logit_softcapping: float
    use_bidirectional_attention: bool
    rope_local_base_freq: float  # config.json: rope_parameters.sliding_attention.rope_theta or rope_local_base_freq
    local_rope_scaling: dict[str, Any] | None  # config.json: rope_parameters.sliding_attention
    sliding_window_pattern: int  # config.json: sliding_window_pattern or _sliding_window_pattern

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
        "rope_parameters.full_attention.rope_theta",
        "rope_theta",
        "rope_parameters.full_attention",
        "rope_scaling",
        "attention_bias",
        "tie_word_embeddings",
        "hidden_act",
        "hidden_activation",
        "query_pre_attn_scalar",
        "sliding_window",
        "layer_types",
        "attn_logit_softcapping",
        "final_logit_softcapping",
        "use_bidirectional_attention",
        "rope_parameters.sliding_attention.rope_theta",
        "rope_local_base_freq",
        "rope_parameters.sliding_attention",
        "sliding_window_pattern",
        "_sliding_window_pattern",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "vision_config",
        "mm_tokens_per_image",
        "boi_token_index",
        "eoi_token_index",
        "image_token_index",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "Gemma3Config":
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
            head_dim = 256
        max_position_embeddings = read_int(cfg, "max_position_embeddings", ("max_position_embeddings",))
        if max_position_embeddings is None:
            max_position_embeddings = 131072
        rms_norm_eps = read_float(cfg, "rms_norm_eps", ("rms_norm_eps",))
        if rms_norm_eps is None:
            rms_norm_eps = 1e-06
        rope_theta = read_float(cfg, "rope_theta", ("rope_parameters.full_attention.rope_theta", "rope_theta"))
        if rope_theta is None:
            rope_theta = 1000000.0
        rope_scaling = read_rope_scaling(cfg, "rope_scaling", ("rope_parameters.full_attention", "rope_scaling"))
        attention_bias = read_bool(cfg, "attention_bias", ("attention_bias",))
        if attention_bias is None:
            attention_bias = False
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = True
        hidden_act = read_str(cfg, "hidden_act", ("hidden_act",))
        if hidden_act is None:
            hidden_act = "silu"
        hidden_activation = read_str(cfg, "hidden_activation", ("hidden_activation",))
        if hidden_activation is None:
            hidden_activation = "gelu_pytorch_tanh"
        query_pre_attn_scalar = read_float(cfg, "query_pre_attn_scalar", ("query_pre_attn_scalar",))
        if query_pre_attn_scalar is None:
            query_pre_attn_scalar = 256
        sliding_window = read_int(cfg, "sliding_window", ("sliding_window",))
        # An explicit null stays None (nullable); only an absent key takes the default.
        if sliding_window is None and not any(key in cfg for key in ("sliding_window",)):
            sliding_window = 4096
        layer_types = read_str_list(cfg, "layer_types", ("layer_types",))
        attn_logit_softcapping = read_float(cfg, "attn_logit_softcapping", ("attn_logit_softcapping",))
        final_logit_softcapping = read_float(cfg, "final_logit_softcapping", ("final_logit_softcapping",))
        use_bidirectional_attention = read_bool(cfg, "use_bidirectional_attention", ("use_bidirectional_attention",))
        rope_local_base_freq = read_float(
            cfg, "rope_local_base_freq", ("rope_parameters.sliding_attention.rope_theta", "rope_local_base_freq")
        )
        if rope_local_base_freq is None:
            rope_local_base_freq = 10000.0
        local_rope_scaling = read_rope_scaling(cfg, "local_rope_scaling", ("rope_parameters.sliding_attention",))
        sliding_window_pattern = read_int(
            cfg, "sliding_window_pattern", ("sliding_window_pattern", "_sliding_window_pattern")
        )
        if sliding_window_pattern is None:
            sliding_window_pattern = 6
        if not (hidden_activation in ['gelu_pytorch_tanh', 'gelu_fast', 'gelu_new']):
            raise ConfigError(
                "specs/gemma3.yaml: only the tanh-approximated GELU (hidden_activation gelu_pytorch_tanh) is generated"
            )
        if use_bidirectional_attention:
            raise ConfigError(
                "specs/gemma3.yaml: bidirectional attention (use_bidirectional_attention) is not generated"
            )
        if not (attn_logit_softcapping is None):
            raise ConfigError(
                "specs/gemma3.yaml: attn_logit_softcapping is not applied by transformers' Gemma 3 (only Gemma 2 "
                "caps attention scores); refused rather than capped",
            )
        if not (final_logit_softcapping is None):
            raise ConfigError(
                "specs/gemma3.yaml: final_logit_softcapping: transformers' Gemma3ForConditionalGeneration does not "
                "apply it (its Gemma3ForCausalLM does); refused rather than capped for one and not the other",
            )
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
            attention_bias=attention_bias,
            tie_word_embeddings=tie_word_embeddings,
            hidden_act=hidden_act,
            hidden_activation=hidden_activation,
            query_pre_attn_scalar=query_pre_attn_scalar,
            sliding_window=sliding_window,
            layer_types=layer_types,
            attn_logit_softcapping=attn_logit_softcapping,
            final_logit_softcapping=final_logit_softcapping,
            use_bidirectional_attention=use_bidirectional_attention,
            rope_local_base_freq=rope_local_base_freq,
            local_rope_scaling=local_rope_scaling,
            sliding_window_pattern=sliding_window_pattern,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return (
            'sliding'
            if (
                self.layer_types[i] == 'sliding_attention'
                if self.layer_types
                else (i + 1) % self.sliding_window_pattern != 0
            )
            else 'decoder'
        )
