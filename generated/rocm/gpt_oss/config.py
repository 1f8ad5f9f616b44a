# ==================================================================================================================
# GENERATED FROM specs/gpt_oss.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/gpt_oss.yaml --target rocm
# source hash (spec + templates + generator): 560ee8db1905c88d
# ==================================================================================================================
"""GptOssConfig: the HF ``config.json`` fields specs/gpt_oss.yaml reads, typed, with the spec's defaults.

Serves: GptOssForCausalLM (model_type ``gpt_oss``). Reference: transformers/models/gpt_oss/modeling_gpt_oss.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from modelgen.runtime.hf_config import (
    as_dict,
    read_bool,
    read_float,
    read_int,
    read_rope_scaling,
    read_str_list,
    require,
)

ARCHITECTURES = ("GptOssForCausalLM",)


@dataclass(frozen=True)
class GptOssConfig:
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
    attention_bias: bool
    tie_word_embeddings: bool
    sliding_window: int
    layer_types: list[str]
    num_local_experts: int  # config.json: num_local_experts or num_experts
    num_experts_per_tok: int
    swiglu_alpha: float
    swiglu_limit: float

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
        "attention_bias",
        "tie_word_embeddings",
        "sliding_window",
        "layer_types",
        "num_local_experts",
        "num_experts",
        "num_experts_per_tok",
        "swiglu_alpha",
        "swiglu_limit",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "hidden_act",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "GptOssConfig":
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
            head_dim = 64
        max_position_embeddings = read_int(cfg, "max_position_embeddings", ("max_position_embeddings",))
        if max_position_embeddings is None:
            max_position_embeddings = 131072
        rms_norm_eps = read_float(cfg, "rms_norm_eps", ("rms_norm_eps",))
        if rms_norm_eps is None:
            rms_norm_eps = 1e-05
        rope_theta = read_float(cfg, "rope_theta", ("rope_theta", "rope_parameters.rope_theta"))
        if rope_theta is None:
            rope_theta = 150000.0
        rope_scaling = read_rope_scaling(cfg, "rope_scaling", ("rope_parameters", "rope_scaling"))
        attention_bias = read_bool(cfg, "attention_bias", ("attention_bias",))
        if attention_bias is None:
            attention_bias = True
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = False
        sliding_window = read_int(cfg, "sliding_window", ("sliding_window",))
        # An explicit null stays None (nullable); only an absent key takes the default.
        if sliding_window is None and not any(key in cfg for key in ("sliding_window",)):
            sliding_window = 128
        layer_types = read_str_list(cfg, "layer_types", ("layer_types",))
        num_local_experts = read_int(cfg, "num_local_experts", ("num_local_experts", "num_experts"))
        if num_local_experts is None:
            num_local_experts = 128
        num_experts_per_tok = read_int(cfg, "num_experts_per_tok", ("num_experts_per_tok",))
        if num_experts_per_tok is None:
            num_experts_per_tok = 4
        swiglu_alpha = read_float(cfg, "swiglu_alpha", ("swiglu_alpha",))
        if swiglu_alpha is None:
            swiglu_alpha = 1.702
        swiglu_limit = read_float(cfg, "swiglu_limit", ("swiglu_limit",))
        if swiglu_limit is None:
            swiglu_limit = 7.0
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
            sliding_window=sliding_window,
            layer_types=layer_types,
            num_local_experts=num_local_experts,
            num_experts_per_tok=num_experts_per_tok,
            swiglu_alpha=swiglu_alpha,
            swiglu_limit=swiglu_limit,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return (
            'sliding'
            if (self.layer_types[i] == 'sliding_attention' if self.layer_types else i % 2 == 0)
            else 'decoder'
        )
