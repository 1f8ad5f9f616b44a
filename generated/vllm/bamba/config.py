# ==================================================================================================================
# GENERATED FROM specs/bamba.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/bamba.yaml --target vllm
# source hash (spec + templates + generator): 4a2ad3a1ea9ac77a
# ==================================================================================================================
"""BambaConfig: the HF ``config.json`` fields specs/bamba.yaml reads, typed, with the spec's defaults.

Serves: BambaForCausalLM (model_type ``bamba``). Reference: transformers/models/bamba/modeling_bamba.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from modelgen.runtime.hf_config import (
    ConfigError,
    as_dict,
    read_bool,
    read_float,
    read_float_list,
    read_int,
    read_int_list,
    read_rope_scaling,
    read_str,
    require,
)

ARCHITECTURES = ("BambaForCausalLM",)


@dataclass(frozen=True)
class BambaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float  # config.json: rope_theta or rope_parameters.rope_theta
    rope_scaling: dict[str, Any] | None  # config.json: rope_parameters or rope_scaling
    attention_bias: bool
    mlp_bias: bool
    tie_word_embeddings: bool
    hidden_act: str
    partial_rotary_factor: float  # config.json: rope_parameters.partial_rotary_factor or partial_rotary_factor
    attn_layer_indices: list[int]
    mamba_n_heads: int
    mamba_expand: int
    mamba_d_head: int
    mamba_n_groups: int
    mamba_d_state: int
    mamba_d_conv: int
    mamba_chunk_size: int
    mamba_conv_bias: bool
    mamba_proj_bias: bool
    time_step_limit: list[float]

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
        "rope_theta",
        "rope_parameters.rope_theta",
        "rope_parameters",
        "rope_scaling",
        "attention_bias",
        "mlp_bias",
        "tie_word_embeddings",
        "hidden_act",
        "rope_parameters.partial_rotary_factor",
        "partial_rotary_factor",
        "attn_layer_indices",
        "mamba_n_heads",
        "mamba_expand",
        "mamba_d_head",
        "mamba_n_groups",
        "mamba_d_state",
        "mamba_d_conv",
        "mamba_chunk_size",
        "mamba_conv_bias",
        "mamba_proj_bias",
        "time_step_limit",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "num_logits_to_keep",
        "z_loss_coefficient",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "BambaConfig":
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
            rms_norm_eps = 1e-05
        rope_theta = read_float(cfg, "rope_theta", ("rope_theta", "rope_parameters.rope_theta"))
        if rope_theta is None:
            rope_theta = 10000.0
        rope_scaling = read_rope_scaling(cfg, "rope_scaling", ("rope_parameters", "rope_scaling"))
        attention_bias = read_bool(cfg, "attention_bias", ("attention_bias",))
        if attention_bias is None:
            attention_bias = False
        mlp_bias = read_bool(cfg, "mlp_bias", ("mlp_bias",))
        if mlp_bias is None:
            mlp_bias = False
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = False
        hidden_act = read_str(cfg, "hidden_act", ("hidden_act",))
        if hidden_act is None:
            hidden_act = "silu"
        partial_rotary_factor = read_float(
            cfg, "partial_rotary_factor", ("rope_parameters.partial_rotary_factor", "partial_rotary_factor")
        )
        if partial_rotary_factor is None:
            partial_rotary_factor = 0.5
        attn_layer_indices = read_int_list(cfg, "attn_layer_indices", ("attn_layer_indices",))
        mamba_n_heads = read_int(cfg, "mamba_n_heads", ("mamba_n_heads",))
        if mamba_n_heads is None:
            mamba_n_heads = 128
        mamba_expand = read_int(cfg, "mamba_expand", ("mamba_expand",))
        if mamba_expand is None:
            mamba_expand = 2
        mamba_d_head = read_int(cfg, "mamba_d_head", ("mamba_d_head",))
        if mamba_d_head is None:
            mamba_d_head = mamba_expand * hidden_size // mamba_n_heads
        mamba_n_groups = read_int(cfg, "mamba_n_groups", ("mamba_n_groups",))
        if mamba_n_groups is None:
            mamba_n_groups = 1
        mamba_d_state = read_int(cfg, "mamba_d_state", ("mamba_d_state",))
        if mamba_d_state is None:
            mamba_d_state = 256
        mamba_d_conv = read_int(cfg, "mamba_d_conv", ("mamba_d_conv",))
        if mamba_d_conv is None:
            mamba_d_conv = 4
        mamba_chunk_size = read_int(cfg, "mamba_chunk_size", ("mamba_chunk_size",))
        if mamba_chunk_size is None:
            mamba_chunk_size = 256
        mamba_conv_bias = read_bool(cfg, "mamba_conv_bias", ("mamba_conv_bias",))
        if mamba_conv_bias is None:
            mamba_conv_bias = True
        mamba_proj_bias = read_bool(cfg, "mamba_proj_bias", ("mamba_proj_bias",))
        if mamba_proj_bias is None:
            mamba_proj_bias = False
        time_step_limit = read_float_list(cfg, "time_step_limit", ("time_step_limit",))
        if time_step_limit is None:
            time_step_limit = [0.0, float('inf')]
        if not (hidden_act in ('silu', 'swish')):
            raise ConfigError(
                "specs/bamba.yaml: hidden_act other than silu (the MLP's and the Mamba-2 conv's activation) is not "
                "generated by this spec",
            )
        if not (mamba_n_heads * mamba_d_head == mamba_expand * hidden_size):
            raise ConfigError(
                "specs/bamba.yaml: mamba_n_heads * mamba_d_head must equal mamba_expand * hidden_size "
                "(BambaConfig's own check)",
            )
        if not (mamba_n_heads % mamba_n_groups == 0):
            raise ConfigError(
                "specs/bamba.yaml: mamba_n_heads must be a multiple of mamba_n_groups (each group of B / C serves "
                "whole heads)",
            )
        if not (mamba_d_conv >= 2):
            raise ConfigError(
                "specs/bamba.yaml: mamba_d_conv below 2 leaves the conv no history to keep (a one-tap kernel is not "
                "generated)",
            )
        if not (len(time_step_limit) == 2):
            raise ConfigError("specs/bamba.yaml: time_step_limit must be a (min, max) pair")
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            max_position_embeddings=max_position_embeddings,
            rms_norm_eps=rms_norm_eps,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            attention_bias=attention_bias,
            mlp_bias=mlp_bias,
            tie_word_embeddings=tie_word_embeddings,
            hidden_act=hidden_act,
            partial_rotary_factor=partial_rotary_factor,
            attn_layer_indices=attn_layer_indices,
            mamba_n_heads=mamba_n_heads,
            mamba_expand=mamba_expand,
            mamba_d_head=mamba_d_head,
            mamba_n_groups=mamba_n_groups,
            mamba_d_state=mamba_d_state,
            mamba_d_conv=mamba_d_conv,
            mamba_chunk_size=mamba_chunk_size,
            mamba_conv_bias=mamba_conv_bias,
            mamba_proj_bias=mamba_proj_bias,
            time_step_limit=time_step_limit,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return 'attention' if self.attn_layer_indices is not None and i in self.attn_layer_indices else 'mamba'
