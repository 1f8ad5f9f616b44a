# ==================================================================================================================
# GENERATED FROM specs/starcoder2.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/starcoder2.yaml --target rocm
# source hash (spec + templates + generator): 28ed493bede862a2
# ==================================================================================================================
"""Starcoder2Config: the HF ``config.json`` fields specs/starcoder2.yaml reads, typed, with the spec's defaults.

Serves: Starcoder2ForCausalLM (model_type ``starcoder2``). Reference:
transformers/models/starcoder2/modeling_starcoder2.py.
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

ARCHITECTURES = ("Starcoder2ForCausalLM",)


@dataclass(frozen=True)
class Starcoder2Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rope_theta: float  # config.json: rope_theta or rope_parameters.rope_theta
    rope_scaling: dict[str, Any] | None  # config.json: rope_parameters or rope_scaling
    tie_word_embeddings: bool
    hidden_act: str
    norm_epsilon: float
    use_bias: bool
    sliding_window: int

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
        "rope_theta",
        "rope_parameters.rope_theta",
        "rope_parameters",
        "rope_scaling",
        "tie_word_embeddings",
        "hidden_act",
        "norm_epsilon",
        "use_bias",
        "sliding_window",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "residual_dropout",
        "embedding_dropout",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "Starcoder2Config":
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
            num_key_value_heads = 2
        head_dim = read_int(cfg, "head_dim", ("head_dim",))
        if head_dim is None:
            head_dim = hidden_size // num_attention_heads
        max_position_embeddings = read_int(cfg, "max_position_embeddings", ("max_position_embeddings",))
        if max_position_embeddings is None:
            max_position_embeddings = 4096
        rope_theta = read_float(cfg, "rope_theta", ("rope_theta", "rope_parameters.rope_theta"))
        if rope_theta is None:
            rope_theta = 10000.0
        rope_scaling = read_rope_scaling(cfg, "rope_scaling", ("rope_parameters", "rope_scaling"))
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = True
        hidden_act = read_str(cfg, "hidden_act", ("hidden_act",))
        if hidden_act is None:
            hidden_act = "gelu_pytorch_tanh"
        norm_epsilon = read_float(cfg, "norm_epsilon", ("norm_epsilon",))
        if norm_epsilon is None:
            norm_epsilon = 1e-05
        use_bias = read_bool(cfg, "use_bias", ("use_bias",))
        if use_bias is None:
            use_bias = True
        sliding_window = read_int(cfg, "sliding_window", ("sliding_window",))
        if not (hidden_act in ('gelu_pytorch_tanh', 'gelu_new', 'gelu_fast')):
            raise ConfigError(
                "specs/starcoder2.yaml: hidden_act other than gelu_pytorch_tanh (the MLP's activation) is not "
                "generated by this spec",
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
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            tie_word_embeddings=tie_word_embeddings,
            hidden_act=hidden_act,
            norm_epsilon=norm_epsilon,
            use_bias=use_bias,
            sliding_window=sliding_window,
        )
