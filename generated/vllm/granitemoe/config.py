# ==================================================================================================================
# GENERATED FROM specs/granitemoe.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/granitemoe.yaml --target vllm
# source hash (spec + templates + generator): 293ae632995ee058
# ==================================================================================================================
"""GraniteMoeConfig: the HF ``config.json`` fields specs/granitemoe.yaml reads, typed, with the spec's defaults.

Serves: GraniteMoeForCausalLM (model_type ``granitemoe``). Reference:
transformers/models/granitemoe/modeling_granitemoe.py.
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

ARCHITECTURES = ("GraniteMoeForCausalLM",)


@dataclass(frozen=True)
class GraniteMoeConfig:
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
    hidden_act: str
    embedding_multiplier: float
    residual_multiplier: float
    attention_multiplier: float
    logits_scaling: float
    num_local_experts: int
    num_experts_per_tok: int

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
        "hidden_act",
        "embedding_multiplier",
        "residual_multiplier",
        "attention_multiplier",
        "logits_scaling",
        "num_local_experts",
        "num_experts_per_tok",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "GraniteMoeConfig":
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
            max_position_embeddings = 2048
        rms_norm_eps = read_float(cfg, "rms_norm_eps", ("rms_norm_eps",))
        if rms_norm_eps is None:
            rms_norm_eps = 1e-06
        rope_theta = read_float(cfg, "rope_theta", ("rope_theta", "rope_parameters.rope_theta"))
        if rope_theta is None:
            rope_theta = 10000.0
        rope_scaling = read_rope_scaling(cfg, "rope_scaling", ("rope_parameters", "rope_scaling"))
        attention_bias = read_bool(cfg, "attention_bias", ("attention_bias",))
        if attention_bias is None:
            attention_bias = False
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = False
        hidden_act = read_str(cfg, "hidden_act", ("hidden_act",))
        if hidden_act is None:
            hidden_act = "silu"
        embedding_multiplier = read_float(cfg, "embedding_multiplier", ("embedding_multiplier",))
        if embedding_multiplier is None:
            embedding_multiplier = 1.0
        residual_multiplier = read_float(cfg, "residual_multiplier", ("residual_multiplier",))
        if residual_multiplier is None:
            residual_multiplier = 1.0
        attention_multiplier = read_float(cfg, "attention_multiplier", ("attention_multiplier",))
        if attention_multiplier is None:
            attention_multiplier = 1.0
        logits_scaling = read_float(cfg, "logits_scaling", ("logits_scaling",))
        if logits_scaling is None:
            logits_scaling = 1.0
        num_local_experts = read_int(cfg, "num_local_experts", ("num_local_experts",))
        if num_local_experts is None:
            num_local_experts = 8
        num_experts_per_tok = read_int(cfg, "num_experts_per_tok", ("num_experts_per_tok",))
        if num_experts_per_tok is None:
            num_experts_per_tok = 2
        if not (hidden_act == 'silu'):
            raise ConfigError(
                "specs/granitemoe.yaml: hidden_act other than silu (the experts' activation) is not generated by "
                "this spec",
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
            embedding_multiplier=embedding_multiplier,
            residual_multiplier=residual_multiplier,
            attention_multiplier=attention_multiplier,
            logits_scaling=logits_scaling,
            num_local_experts=num_local_experts,
            num_experts_per_tok=num_experts_per_tok,
        )
