# ==================================================================================================================
# GENERATED FROM specs/stablelm.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/stablelm.yaml --target vllm
# source hash (spec + templates + generator): 6fd7ab6125e9c1bf
# ==================================================================================================================
"""StableLmConfig: the HF ``config.json`` fields specs/stablelm.yaml reads, typed, with the spec's defaults.

Serves: StableLmForCausalLM (model_type ``stablelm``). Reference: transformers/models/stablelm/modeling_stablelm.py.
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
    require,
)

ARCHITECTURES = ("StableLmForCausalLM",)


@dataclass(frozen=True)
class StableLmConfig:
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
    hidden_act: str
    layer_norm_eps: float
    use_qkv_bias: bool
    qk_layernorm: bool
    use_parallel_residual: bool
    partial_rotary_factor: float  # config.json: rope_parameters.partial_rotary_factor or partial_rotary_factor

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
        "hidden_act",
        "layer_norm_eps",
        "use_qkv_bias",
        "qk_layernorm",
        "use_parallel_residual",
        "rope_parameters.partial_rotary_factor",
        "partial_rotary_factor",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "StableLmConfig":
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
            max_position_embeddings = 4096
        rope_theta = read_float(cfg, "rope_theta", ("rope_theta", "rope_parameters.rope_theta"))
        if rope_theta is None:
            rope_theta = 10000.0
        rope_scaling = read_rope_scaling(cfg, "rope_scaling", ("rope_parameters", "rope_scaling"))
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = False
        hidden_act = read_str(cfg, "hidden_act", ("hidden_act",))
        if hidden_act is None:
            hidden_act = "silu"
        layer_norm_eps = read_float(cfg, "layer_norm_eps", ("layer_norm_eps",))
        if layer_norm_eps is None:
            layer_norm_eps = 1e-05
        use_qkv_bias = read_bool(cfg, "use_qkv_bias", ("use_qkv_bias",))
        if use_qkv_bias is None:
            use_qkv_bias = False
        qk_layernorm = read_bool(cfg, "qk_layernorm", ("qk_layernorm",))
        if qk_layernorm is None:
            qk_layernorm = False
        use_parallel_residual = read_bool(cfg, "use_parallel_residual", ("use_parallel_residual",))
        if use_parallel_residual is None:
            use_parallel_residual = False
        partial_rotary_factor = read_float(
            cfg, "partial_rotary_factor", ("rope_parameters.partial_rotary_factor", "partial_rotary_factor")
        )
        if partial_rotary_factor is None:
            partial_rotary_factor = 0.25
        if not (hidden_act == 'silu'):
            raise ConfigError("specs/stablelm.yaml: only the SiLU-gated MLP (hidden_act silu) is generated")
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
            hidden_act=hidden_act,
            layer_norm_eps=layer_norm_eps,
            use_qkv_bias=use_qkv_bias,
            qk_layernorm=qk_layernorm,
            use_parallel_residual=use_parallel_residual,
            partial_rotary_factor=partial_rotary_factor,
        )
