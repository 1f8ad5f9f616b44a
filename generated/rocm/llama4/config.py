# ==================================================================================================================
# GENERATED FROM specs/llama4.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/llama4.yaml --target rocm
# source hash (spec + templates + generator): 19628cc76f58aab4
# ==================================================================================================================
"""Llama4Config: the HF ``config.json`` fields specs/llama4.yaml reads, typed, with the spec's defaults.

Serves: Llama4ForCausalLM (model_type ``llama4_text``). Reference: transformers/models/llama4/modeling_llama4.py.
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
    require,
)

ARCHITECTURES = ("Llama4ForCausalLM",)


@dataclass(frozen=True)
class Llama4Config:
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
    intermediate_size_mlp: int
    no_rope_layers: list[int]
    no_rope_layer_interval: int
    use_qk_norm: bool
    attn_temperature_tuning: bool
    floor_scale: float
    attn_scale: float
    attention_chunk_size: int
    moe_layers: list[int]
    interleave_moe_layer_step: int
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
        "intermediate_size_mlp",
        "no_rope_layers",
        "no_rope_layer_interval",
        "use_qk_norm",
        "attn_temperature_tuning",
        "floor_scale",
        "attn_scale",
        "attention_chunk_size",
        "moe_layers",
        "interleave_moe_layer_step",
        "num_local_experts",
        "num_experts_per_tok",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "layer_types",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "Llama4Config":
        """Build from a parsed ``config.json`` dict or a transformers ``PretrainedConfig``."""
        cfg = as_dict(hf_config)
        vocab_size = read_int(cfg, "vocab_size", ("vocab_size",))
        if vocab_size is None:
            vocab_size = 202048
        hidden_size = require("hidden_size", ("hidden_size",), read_int(cfg, "hidden_size", ("hidden_size",)))
        intermediate_size = read_int(cfg, "intermediate_size", ("intermediate_size",))
        if intermediate_size is None:
            intermediate_size = 8192
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
            head_dim = 128
        max_position_embeddings = read_int(cfg, "max_position_embeddings", ("max_position_embeddings",))
        if max_position_embeddings is None:
            max_position_embeddings = 131072
        rms_norm_eps = read_float(cfg, "rms_norm_eps", ("rms_norm_eps",))
        if rms_norm_eps is None:
            rms_norm_eps = 1e-05
        rope_theta = read_float(cfg, "rope_theta", ("rope_theta", "rope_parameters.rope_theta"))
        if rope_theta is None:
            rope_theta = 500000.0
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
        intermediate_size_mlp = read_int(cfg, "intermediate_size_mlp", ("intermediate_size_mlp",))
        if intermediate_size_mlp is None:
            intermediate_size_mlp = 16384
        no_rope_layers = read_int_list(cfg, "no_rope_layers", ("no_rope_layers",))
        if no_rope_layers is None:
            no_rope_layers = []
        no_rope_layer_interval = read_int(cfg, "no_rope_layer_interval", ("no_rope_layer_interval",))
        if no_rope_layer_interval is None:
            no_rope_layer_interval = 4
        use_qk_norm = read_bool(cfg, "use_qk_norm", ("use_qk_norm",))
        if use_qk_norm is None:
            use_qk_norm = True
        attn_temperature_tuning = read_bool(cfg, "attn_temperature_tuning", ("attn_temperature_tuning",))
        if attn_temperature_tuning is None:
            attn_temperature_tuning = True
        floor_scale = read_float(cfg, "floor_scale", ("floor_scale",))
        if floor_scale is None:
            floor_scale = 8192
        attn_scale = read_float(cfg, "attn_scale", ("attn_scale",))
        if attn_scale is None:
            attn_scale = 0.1
        attention_chunk_size = read_int(cfg, "attention_chunk_size", ("attention_chunk_size",))
        # An explicit null stays None (nullable); only an absent key takes the default.
        if attention_chunk_size is None and not any(key in cfg for key in ("attention_chunk_size",)):
            attention_chunk_size = 8192
        moe_layers = read_int_list(cfg, "moe_layers", ("moe_layers",))
        interleave_moe_layer_step = read_int(cfg, "interleave_moe_layer_step", ("interleave_moe_layer_step",))
        if interleave_moe_layer_step is None:
            interleave_moe_layer_step = 1
        num_local_experts = read_int(cfg, "num_local_experts", ("num_local_experts",))
        if num_local_experts is None:
            num_local_experts = 16
        num_experts_per_tok = read_int(cfg, "num_experts_per_tok", ("num_experts_per_tok",))
        if num_experts_per_tok is None:
            num_experts_per_tok = 1
        if not (hidden_act == 'silu'):
            raise ConfigError(
                "specs/llama4.yaml: hidden_act other than silu (the MLP's activation) is not generated by this spec"
            )
        if not (interleave_moe_layer_step >= 1):
            raise ConfigError("specs/llama4.yaml: interleave_moe_layer_step below 1 names no MoE layer schedule")
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
            intermediate_size_mlp=intermediate_size_mlp,
            no_rope_layers=no_rope_layers,
            no_rope_layer_interval=no_rope_layer_interval,
            use_qk_norm=use_qk_norm,
            attn_temperature_tuning=attn_temperature_tuning,
            floor_scale=floor_scale,
            attn_scale=attn_scale,
            attention_chunk_size=attention_chunk_size,
            moe_layers=moe_layers,
            interleave_moe_layer_step=interleave_moe_layer_step,
            num_local_experts=num_local_experts,
            num_experts_per_tok=num_experts_per_tok,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return (
            (
                'decoder'
                if (self.no_rope_layers[i] if self.no_rope_layers else (i + 1) % self.no_rope_layer_interval != 0)
                else 'nope'
            )
            + (
                '_moe'
                if (
                    i in self.moe_layers
                    if self.moe_layers is not None
                    else (i + 1) % self.interleave_moe_layer_step == 0
                )
                else ''
            )
        )
