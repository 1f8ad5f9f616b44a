# ==================================================================================================================
# GENERATED FROM specs/qwen3_5_moe.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen3_5_moe.yaml --target rocm
# source hash (spec + templates + generator): 105439931bad3ad5
# ==================================================================================================================
"""Qwen35MoeConfig: the HF ``config.json`` fields specs/qwen3_5_moe.yaml reads, typed, with the spec's defaults.

Serves: Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration (model_type ``qwen3_5_moe_text``). Reference:
transformers/models/qwen3_5_moe/modeling_qwen3_5_moe.py.
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

ARCHITECTURES = ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration")


@dataclass(frozen=True)
class Qwen35MoeConfig:
    vocab_size: int
    hidden_size: int
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
    moe_intermediate_size: int
    partial_rotary_factor: float  # config.json: partial_rotary_factor or rope_parameters.partial_rotary_factor
    layer_types: list[str]
    full_attention_interval: int
    linear_conv_kernel_dim: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    shared_expert_intermediate_size: int
    mtp_num_hidden_layers: int

    # config.json keys read above (dotted = inside a mapping) and keys the spec declares irrelevant (config_ignore);
    # modelgen.runtime.hf_config.check_config_keys reports any other key, which this model would not honour.
    CONFIG_KEYS_READ: ClassVar[tuple[str, ...]] = (
        "vocab_size",
        "hidden_size",
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
        "moe_intermediate_size",
        "partial_rotary_factor",
        "rope_parameters.partial_rotary_factor",
        "layer_types",
        "full_attention_interval",
        "linear_conv_kernel_dim",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_num_key_heads",
        "linear_num_value_heads",
        "shared_expert_intermediate_size",
        "mtp_num_hidden_layers",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "vision_config",
        "image_token_id",
        "video_token_id",
        "vision_start_token_id",
        "vision_end_token_id",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "Qwen35MoeConfig":
        """Build from a parsed ``config.json`` dict or a transformers ``PretrainedConfig``."""
        cfg = as_dict(hf_config)
        vocab_size = require("vocab_size", ("vocab_size",), read_int(cfg, "vocab_size", ("vocab_size",)))
        hidden_size = require("hidden_size", ("hidden_size",), read_int(cfg, "hidden_size", ("hidden_size",)))
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
            max_position_embeddings = 32768
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
        num_experts = read_int(cfg, "num_experts", ("num_experts", "num_local_experts"))
        if num_experts is None:
            num_experts = 256
        num_experts_per_tok = read_int(cfg, "num_experts_per_tok", ("num_experts_per_tok",))
        if num_experts_per_tok is None:
            num_experts_per_tok = 8
        moe_intermediate_size = read_int(cfg, "moe_intermediate_size", ("moe_intermediate_size",))
        if moe_intermediate_size is None:
            moe_intermediate_size = 512
        partial_rotary_factor = read_float(
            cfg, "partial_rotary_factor", ("partial_rotary_factor", "rope_parameters.partial_rotary_factor")
        )
        if partial_rotary_factor is None:
            partial_rotary_factor = 0.25
        layer_types = read_str_list(cfg, "layer_types", ("layer_types",))
        full_attention_interval = read_int(cfg, "full_attention_interval", ("full_attention_interval",))
        if full_attention_interval is None:
            full_attention_interval = 4
        linear_conv_kernel_dim = read_int(cfg, "linear_conv_kernel_dim", ("linear_conv_kernel_dim",))
        if linear_conv_kernel_dim is None:
            linear_conv_kernel_dim = 4
        linear_key_head_dim = read_int(cfg, "linear_key_head_dim", ("linear_key_head_dim",))
        if linear_key_head_dim is None:
            linear_key_head_dim = 128
        linear_value_head_dim = read_int(cfg, "linear_value_head_dim", ("linear_value_head_dim",))
        if linear_value_head_dim is None:
            linear_value_head_dim = 128
        linear_num_key_heads = read_int(cfg, "linear_num_key_heads", ("linear_num_key_heads",))
        if linear_num_key_heads is None:
            linear_num_key_heads = 16
        linear_num_value_heads = read_int(cfg, "linear_num_value_heads", ("linear_num_value_heads",))
        if linear_num_value_heads is None:
            linear_num_value_heads = 32
        shared_expert_intermediate_size = read_int(
            cfg, "shared_expert_intermediate_size", ("shared_expert_intermediate_size",)
        )
        if shared_expert_intermediate_size is None:
            shared_expert_intermediate_size = 512
        mtp_num_hidden_layers = read_int(cfg, "mtp_num_hidden_layers", ("mtp_num_hidden_layers",))
        if mtp_num_hidden_layers is None:
            mtp_num_hidden_layers = 0
        if not (hidden_act == 'silu'):
            raise ConfigError(
                "specs/qwen3_5_moe.yaml: hidden_act other than silu (the MLP's activation) is not generated by this "
                "spec",
            )
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
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
            moe_intermediate_size=moe_intermediate_size,
            partial_rotary_factor=partial_rotary_factor,
            layer_types=layer_types,
            full_attention_interval=full_attention_interval,
            linear_conv_kernel_dim=linear_conv_kernel_dim,
            linear_key_head_dim=linear_key_head_dim,
            linear_value_head_dim=linear_value_head_dim,
            linear_num_key_heads=linear_num_key_heads,
            linear_num_value_heads=linear_num_value_heads,
            shared_expert_intermediate_size=shared_expert_intermediate_size,
            mtp_num_hidden_layers=mtp_num_hidden_layers,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return (
            'linear'
            if (
                self.layer_types[i] == 'linear_attention'
                if self.layer_types
                else (i + 1) % self.full_attention_interval != 0
            )
            else 'full'
        )
