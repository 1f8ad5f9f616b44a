# ==================================================================================================================
# GENERATED FROM specs/dbrx.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/dbrx.yaml --target rocm
# source hash (spec + templates + generator): 51000dfa6911d58b
# ==================================================================================================================
"""DbrxConfig: the HF ``config.json`` fields specs/dbrx.yaml reads, typed, with the spec's defaults.

Serves: DbrxForCausalLM (model_type ``dbrx``). Reference: transformers/models/dbrx/modeling_dbrx.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from modelgen.runtime.hf_config import (
    ConfigError,
    as_dict,
    config_has,
    read_bool,
    read_float,
    read_int,
    read_rope_scaling,
    read_str,
)

ARCHITECTURES = ("DbrxForCausalLM",)


@dataclass(frozen=True)
class DbrxConfig:
    vocab_size: int
    hidden_size: int  # config.json: d_model
    intermediate_size: int  # config.json: ffn_config.ffn_hidden_size
    num_hidden_layers: int  # config.json: n_layers
    num_attention_heads: int  # config.json: n_heads
    num_key_value_heads: int  # config.json: attn_config.kv_n_heads
    max_position_embeddings: int  # config.json: max_seq_len
    rope_theta: float  # config.json: rope_parameters.rope_theta or attn_config.rope_theta
    rope_scaling: dict[str, Any] | None  # config.json: rope_parameters or rope_scaling
    tie_word_embeddings: bool
    clip_qkv: float  # config.json: attn_config.clip_qkv
    num_local_experts: int  # config.json: ffn_config.moe_num_experts
    num_experts_per_tok: int  # config.json: ffn_config.moe_top_k
    moe_normalize_expert_weights: float  # config.json: ffn_config.moe_normalize_expert_weights
    ffn_act_fn: str  # config.json: ffn_config.ffn_act_fn.name

    # config.json keys read above (dotted = inside a mapping) and keys the spec declares irrelevant (config_ignore);
    # modelgen.runtime.hf_config.check_config_keys reports any other key, which this model would not honour.
    CONFIG_KEYS_READ: ClassVar[tuple[str, ...]] = (
        "vocab_size",
        "d_model",
        "ffn_config.ffn_hidden_size",
        "n_layers",
        "n_heads",
        "attn_config.kv_n_heads",
        "max_seq_len",
        "rope_parameters.rope_theta",
        "attn_config.rope_theta",
        "rope_parameters",
        "rope_scaling",
        "tie_word_embeddings",
        "attn_config.clip_qkv",
        "ffn_config.moe_num_experts",
        "ffn_config.moe_top_k",
        "ffn_config.moe_normalize_expert_weights",
        "ffn_config.ffn_act_fn.name",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "resid_pdrop",
        "emb_pdrop",
        "attn_config.attn_pdrop",
        "ffn_config.moe_jitter_eps",
        "ffn_config.moe_loss_weight",
        "ffn_config.hidden_size",
        "num_key_value_heads",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "DbrxConfig":
        """Build from a parsed ``config.json`` dict or a transformers ``PretrainedConfig``."""
        cfg = as_dict(hf_config)
        vocab_size = read_int(cfg, "vocab_size", ("vocab_size",))
        if vocab_size is None:
            vocab_size = 32000
        hidden_size = read_int(cfg, "hidden_size", ("d_model",))
        if hidden_size is None:
            hidden_size = 2048
        intermediate_size = read_int(cfg, "intermediate_size", ("ffn_config.ffn_hidden_size",))
        if intermediate_size is None:
            intermediate_size = 3584
        num_hidden_layers = read_int(cfg, "num_hidden_layers", ("n_layers",))
        if num_hidden_layers is None:
            num_hidden_layers = 24
        num_attention_heads = read_int(cfg, "num_attention_heads", ("n_heads",))
        if num_attention_heads is None:
            num_attention_heads = 16
        num_key_value_heads = read_int(cfg, "num_key_value_heads", ("attn_config.kv_n_heads",))
        if num_key_value_heads is None:
            num_key_value_heads = 1
        max_position_embeddings = read_int(cfg, "max_position_embeddings", ("max_seq_len",))
        if max_position_embeddings is None:
            max_position_embeddings = 2048
        rope_theta = read_float(cfg, "rope_theta", ("rope_parameters.rope_theta", "attn_config.rope_theta"))
        if rope_theta is None:
            rope_theta = 10000.0
        rope_scaling = read_rope_scaling(cfg, "rope_scaling", ("rope_parameters", "rope_scaling"))
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = False
        clip_qkv = read_float(cfg, "clip_qkv", ("attn_config.clip_qkv",))
        num_local_experts = read_int(cfg, "num_local_experts", ("ffn_config.moe_num_experts",))
        if num_local_experts is None:
            num_local_experts = 4
        num_experts_per_tok = read_int(cfg, "num_experts_per_tok", ("ffn_config.moe_top_k",))
        if num_experts_per_tok is None:
            num_experts_per_tok = 1
        moe_normalize_expert_weights = read_float(
            cfg, "moe_normalize_expert_weights", ("ffn_config.moe_normalize_expert_weights",)
        )
        # An explicit null stays None (nullable); only an absent key takes the default.
        if moe_normalize_expert_weights is None and not any(
            config_has(cfg, key) for key in ("ffn_config.moe_normalize_expert_weights",)
        ):
            moe_normalize_expert_weights = 1.0
        ffn_act_fn = read_str(cfg, "ffn_act_fn", ("ffn_config.ffn_act_fn.name",))
        if ffn_act_fn is None:
            ffn_act_fn = "silu"
        if not (ffn_act_fn == 'silu'):
            raise ConfigError(
                "specs/dbrx.yaml: ffn_config.ffn_act_fn other than silu (the experts' activation) is not generated"
            )
        if not (moe_normalize_expert_weights is None or moe_normalize_expert_weights > 0):
            raise ConfigError(
                "specs/dbrx.yaml: ffn_config.moe_normalize_expert_weights must be null or a positive p (the top-k "
                "weights' p-norm)",
            )
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
            clip_qkv=clip_qkv,
            num_local_experts=num_local_experts,
            num_experts_per_tok=num_experts_per_tok,
            moe_normalize_expert_weights=moe_normalize_expert_weights,
            ffn_act_fn=ffn_act_fn,
        )
