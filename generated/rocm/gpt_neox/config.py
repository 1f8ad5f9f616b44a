# ==================================================================================================================
# GENERATED FROM specs/gpt_neox.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/gpt_neox.yaml --target rocm
# source hash (spec + templates + generator): aeb2b996043dc05a
# ==================================================================================================================
"""GPTNeoXConfig: the HF ``config.json`` fields specs/gpt_neox.yaml reads, typed, with the spec's defaults.

Serves: GPTNeoXForCausalLM (model_type ``gpt_neox``). Reference: transformers/models/gpt_neox/modeling_gpt_neox.py.
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

ARCHITECTURES = ("GPTNeoXForCausalLM",)


@dataclass(frozen=True)
class GPTNeoXConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    max_position_embeddings: int
    rope_theta: float  # config.json: rope_parameters.rope_theta or rotary_emb_base or rope_theta
    rope_scaling: dict[str, Any] | None  # config.json: rope_parameters or rope_scaling
    attention_bias: bool
    tie_word_embeddings: bool
    hidden_act: str
    layer_norm_eps: float
    use_parallel_residual: bool
    partial_rotary_factor: float  # config.json: rope_parameters.partial_rotary_factor or rotary_pct

    # config.json keys read above (dotted = inside a mapping) and keys the spec declares irrelevant (config_ignore);
    # modelgen.runtime.hf_config.check_config_keys reports any other key, which this model would not honour.
    CONFIG_KEYS_READ: ClassVar[tuple[str, ...]] = (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "max_position_embeddings",
        "rope_parameters.rope_theta",
        "rotary_emb_base",
        "rope_theta",
        "rope_parameters",
        "rope_scaling",
        "attention_bias",
        "tie_word_embeddings",
        "hidden_act",
        "layer_norm_eps",
        "use_parallel_residual",
        "rope_parameters.partial_rotary_factor",
        "rotary_pct",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "GPTNeoXConfig":
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
        max_position_embeddings = read_int(cfg, "max_position_embeddings", ("max_position_embeddings",))
        if max_position_embeddings is None:
            max_position_embeddings = 2048
        rope_theta = read_float(cfg, "rope_theta", ("rope_parameters.rope_theta", "rotary_emb_base", "rope_theta"))
        if rope_theta is None:
            rope_theta = 10000.0
        rope_scaling = read_rope_scaling(cfg, "rope_scaling", ("rope_parameters", "rope_scaling"))
        attention_bias = read_bool(cfg, "attention_bias", ("attention_bias",))
        if attention_bias is None:
            attention_bias = True
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = False
        hidden_act = read_str(cfg, "hidden_act", ("hidden_act",))
        if hidden_act is None:
            hidden_act = "gelu"
        layer_norm_eps = read_float(cfg, "layer_norm_eps", ("layer_norm_eps",))
        if layer_norm_eps is None:
            layer_norm_eps = 1e-05
        use_parallel_residual = read_bool(cfg, "use_parallel_residual", ("use_parallel_residual",))
        if use_parallel_residual is None:
            use_parallel_residual = True
        partial_rotary_factor = read_float(
            cfg, "partial_rotary_factor", ("rope_parameters.partial_rotary_factor", "rotary_pct")
        )
        if partial_rotary_factor is None:
            partial_rotary_factor = 0.25
        if not (hidden_act in ('gelu', 'gelu_new', 'gelu_fast', 'gelu_pytorch_tanh')):
            raise ConfigError(
                "specs/gpt_neox.yaml: hidden_act other than gelu / gelu_fast / gelu_new / gelu_pytorch_tanh (the "
                "MLP's activation) is not generated",
            )
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            max_position_embeddings=max_position_embeddings,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            attention_bias=attention_bias,
            tie_word_embeddings=tie_word_embeddings,
            hidden_act=hidden_act,
            layer_norm_eps=layer_norm_eps,
            use_parallel_residual=use_parallel_residual,
            partial_rotary_factor=partial_rotary_factor,
        )
