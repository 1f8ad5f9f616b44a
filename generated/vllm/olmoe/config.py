# ==================================================================================================================
# GENERATED FROM specs/olmoe.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/olmoe.yaml --target vllm
# source hash (spec + templates + generator): 605953591b9610a0
# ==================================================================================================================
"""OlmoeConfig: the HF ``config.json`` fields specs/olmoe.yaml reads, typed, with the spec's defaults.

Serves: OlmoeForCausalLM (model_type ``olmoe``). Reference: transformers/models/olmoe/modeling_olmoe.py.
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

ARCHITECTURES = ("OlmoeForCausalLM",)


@dataclass(frozen=True)
class OlmoeConfig:
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
    num_experts: int  # config.json: num_experts or num_local_experts
    num_experts_per_tok: int
    norm_topk_prob: bool
    clip_qkv: float

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
        "num_experts",
        "num_local_experts",
        "num_experts_per_tok",
        "norm_topk_prob",
        "clip_qkv",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "OlmoeConfig":
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
            max_position_embeddings = 4096
        rms_norm_eps = read_float(cfg, "rms_norm_eps", ("rms_norm_eps",))
        if rms_norm_eps is None:
            rms_norm_eps = 1e-05
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
        num_experts = read_int(cfg, "num_experts", ("num_experts", "num_local_experts"))
        if num_experts is None:
            num_experts = 64
        num_experts_per_tok = read_int(cfg, "num_experts_per_tok", ("num_experts_per_tok",))
        if num_experts_per_tok is None:
            num_experts_per_tok = 8
        norm_topk_prob = read_bool(cfg, "norm_topk_prob", ("norm_topk_prob",))
        if norm_topk_prob is None:
            norm_topk_prob = False
        clip_qkv = read_float(cfg, "clip_qkv", ("clip_qkv",))
        if not (hidden_act == 'silu'):
            raise ConfigError(
                "specs/olmoe.yaml: hidden_act other than silu (the experts' activation) is not generated by this spec"
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
            num_experts=num_experts,
            num_experts_per_tok=num_experts_per_tok,
            norm_topk_prob=norm_topk_prob,
            clip_qkv=clip_qkv,
        )
