# ==================================================================================================================
# GENERATED FROM specs/jamba.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/jamba.yaml --target rocm
# source hash (spec + templates + generator): 5cda34398e1bf9d2
# ==================================================================================================================
"""JambaConfig: the HF ``config.json`` fields specs/jamba.yaml reads, typed, with the spec's defaults.

Serves: JambaForCausalLM (model_type ``jamba``). Reference: transformers/models/jamba/modeling_jamba.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from modelgen.runtime.hf_config import ConfigError, as_dict, read_bool, read_float, read_int, read_str, require

ARCHITECTURES = ("JambaForCausalLM",)


@dataclass(frozen=True)
class JambaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    rms_norm_eps: float
    tie_word_embeddings: bool
    hidden_act: str
    attn_layer_period: int
    attn_layer_offset: int
    expert_layer_period: int
    expert_layer_offset: int
    num_experts: int  # config.json: num_experts or num_local_experts
    num_experts_per_tok: int
    mamba_d_state: int
    mamba_d_conv: int
    mamba_expand: int
    mamba_dt_rank: int
    mamba_conv_bias: bool
    mamba_proj_bias: bool

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
        "rms_norm_eps",
        "tie_word_embeddings",
        "hidden_act",
        "attn_layer_period",
        "attn_layer_offset",
        "expert_layer_period",
        "expert_layer_offset",
        "num_experts",
        "num_local_experts",
        "num_experts_per_tok",
        "mamba_d_state",
        "mamba_d_conv",
        "mamba_expand",
        "mamba_dt_rank",
        "mamba_conv_bias",
        "mamba_proj_bias",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "use_mamba_kernels",
        "use_mambapy",
        "use_associative_scan",
        "num_logits_to_keep",
        "calc_logits_for_entire_prompt",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "JambaConfig":
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
            max_position_embeddings = 262144
        rms_norm_eps = read_float(cfg, "rms_norm_eps", ("rms_norm_eps",))
        if rms_norm_eps is None:
            rms_norm_eps = 1e-06
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = False
        hidden_act = read_str(cfg, "hidden_act", ("hidden_act",))
        if hidden_act is None:
            hidden_act = "silu"
        attn_layer_period = read_int(cfg, "attn_layer_period", ("attn_layer_period",))
        if attn_layer_period is None:
            attn_layer_period = 8
        attn_layer_offset = read_int(cfg, "attn_layer_offset", ("attn_layer_offset",))
        if attn_layer_offset is None:
            attn_layer_offset = 4
        expert_layer_period = read_int(cfg, "expert_layer_period", ("expert_layer_period",))
        if expert_layer_period is None:
            expert_layer_period = 2
        expert_layer_offset = read_int(cfg, "expert_layer_offset", ("expert_layer_offset",))
        if expert_layer_offset is None:
            expert_layer_offset = 1
        num_experts = read_int(cfg, "num_experts", ("num_experts", "num_local_experts"))
        if num_experts is None:
            num_experts = 16
        num_experts_per_tok = read_int(cfg, "num_experts_per_tok", ("num_experts_per_tok",))
        if num_experts_per_tok is None:
            num_experts_per_tok = 2
        mamba_d_state = read_int(cfg, "mamba_d_state", ("mamba_d_state",))
        if mamba_d_state is None:
            mamba_d_state = 16
        mamba_d_conv = read_int(cfg, "mamba_d_conv", ("mamba_d_conv",))
        if mamba_d_conv is None:
            mamba_d_conv = 4
        mamba_expand = read_int(cfg, "mamba_expand", ("mamba_expand",))
        if mamba_expand is None:
            mamba_expand = 2
        mamba_dt_rank = read_int(cfg, "mamba_dt_rank", ("mamba_dt_rank",))
        if mamba_dt_rank is None:
            mamba_dt_rank = -(-hidden_size // 16)
        mamba_conv_bias = read_bool(cfg, "mamba_conv_bias", ("mamba_conv_bias",))
        if mamba_conv_bias is None:
            mamba_conv_bias = True
        mamba_proj_bias = read_bool(cfg, "mamba_proj_bias", ("mamba_proj_bias",))
        if mamba_proj_bias is None:
            mamba_proj_bias = False
        if not (hidden_act == 'silu'):
            raise ConfigError(
                "specs/jamba.yaml: hidden_act other than silu (the MLP's and the Mamba conv's activation) is not "
                "generated by this spec",
            )
        if not (mamba_d_conv >= 2):
            raise ConfigError(
                "specs/jamba.yaml: mamba_d_conv below 2 leaves the Mamba conv no history to keep (a one-tap kernel "
                "is not generated)",
            )
        if not (attn_layer_offset < attn_layer_period and expert_layer_offset < expert_layer_period):
            raise ConfigError(
                "specs/jamba.yaml: a layer offset must be smaller than its period (JambaConfig refuses it too)"
            )
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            max_position_embeddings=max_position_embeddings,
            rms_norm_eps=rms_norm_eps,
            tie_word_embeddings=tie_word_embeddings,
            hidden_act=hidden_act,
            attn_layer_period=attn_layer_period,
            attn_layer_offset=attn_layer_offset,
            expert_layer_period=expert_layer_period,
            expert_layer_offset=expert_layer_offset,
            num_experts=num_experts,
            num_experts_per_tok=num_experts_per_tok,
            mamba_d_state=mamba_d_state,
            mamba_d_conv=mamba_d_conv,
            mamba_expand=mamba_expand,
            mamba_dt_rank=mamba_dt_rank,
            mamba_conv_bias=mamba_conv_bias,
            mamba_proj_bias=mamba_proj_bias,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return (
            (
                'attention_moe'
                if self.num_experts > 1 and i % self.expert_layer_period == self.expert_layer_offset
                else 'attention_dense'
            )
            if i % self.attn_layer_period == self.attn_layer_offset
            else (
                'mamba_moe'
                if self.num_experts > 1 and i % self.expert_layer_period == self.expert_layer_offset
                else 'mamba_dense'
            )
        )
