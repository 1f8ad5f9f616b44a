# ==================================================================================================================
# GENERATED FROM specs/qwen2_moe.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/qwen2_moe.yaml --target vllm
# source hash (spec + templates + generator): 8cc8b2c09e3837aa
# ==================================================================================================================
"""Qwen2MoeConfig: the HF ``config.json`` fields specs/qwen2_moe.yaml reads, typed, with the spec's defaults.

Serves: Qwen2MoeForCausalLM (model_type ``qwen2_moe``). Reference: transformers/models/qwen2_moe/modeling_qwen2_moe.py.
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
    read_str_list,
    require,
)

ARCHITECTURES = ("Qwen2MoeForCausalLM",)


@dataclass(frozen=True)
class Qwen2MoeConfig:
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
    tie_word_embeddings: bool
    hidden_act: str
    use_sliding_window: bool
    sliding_window: int
    max_window_layers: int
    layer_types: list[str]
    qkv_bias: bool
    num_experts: int  # config.json: num_experts or num_local_experts
    num_experts_per_tok: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    norm_topk_prob: bool
    decoder_sparse_step: int
    mlp_only_layers: list[int]
    window: Any  # derived: sliding_window if use_sliding_window else None

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
        "tie_word_embeddings",
        "hidden_act",
        "use_sliding_window",
        "sliding_window",
        "max_window_layers",
        "layer_types",
        "qkv_bias",
        "num_experts",
        "num_local_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "norm_topk_prob",
        "decoder_sparse_step",
        "mlp_only_layers",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "Qwen2MoeConfig":
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
            max_position_embeddings = 32768
        rms_norm_eps = read_float(cfg, "rms_norm_eps", ("rms_norm_eps",))
        if rms_norm_eps is None:
            rms_norm_eps = 1e-06
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
        use_sliding_window = read_bool(cfg, "use_sliding_window", ("use_sliding_window",))
        if use_sliding_window is None:
            use_sliding_window = False
        sliding_window = read_int(cfg, "sliding_window", ("sliding_window",))
        max_window_layers = read_int(cfg, "max_window_layers", ("max_window_layers",))
        if max_window_layers is None:
            max_window_layers = 28
        layer_types = read_str_list(cfg, "layer_types", ("layer_types",))
        qkv_bias = read_bool(cfg, "qkv_bias", ("qkv_bias",))
        if qkv_bias is None:
            qkv_bias = True
        num_experts = read_int(cfg, "num_experts", ("num_experts", "num_local_experts"))
        if num_experts is None:
            num_experts = 60
        num_experts_per_tok = read_int(cfg, "num_experts_per_tok", ("num_experts_per_tok",))
        if num_experts_per_tok is None:
            num_experts_per_tok = 4
        moe_intermediate_size = read_int(cfg, "moe_intermediate_size", ("moe_intermediate_size",))
        if moe_intermediate_size is None:
            moe_intermediate_size = 1408
        shared_expert_intermediate_size = read_int(
            cfg, "shared_expert_intermediate_size", ("shared_expert_intermediate_size",)
        )
        if shared_expert_intermediate_size is None:
            shared_expert_intermediate_size = 5632
        norm_topk_prob = read_bool(cfg, "norm_topk_prob", ("norm_topk_prob",))
        if norm_topk_prob is None:
            norm_topk_prob = False
        decoder_sparse_step = read_int(cfg, "decoder_sparse_step", ("decoder_sparse_step",))
        if decoder_sparse_step is None:
            decoder_sparse_step = 1
        mlp_only_layers = read_int_list(cfg, "mlp_only_layers", ("mlp_only_layers",))
        if mlp_only_layers is None:
            mlp_only_layers = []
        window = sliding_window if use_sliding_window else None
        if not (use_sliding_window or not layer_types or 'sliding_attention' not in layer_types):
            raise ConfigError(
                "specs/qwen2_moe.yaml: layer_types has sliding_attention layers but use_sliding_window is false"
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
            tie_word_embeddings=tie_word_embeddings,
            hidden_act=hidden_act,
            use_sliding_window=use_sliding_window,
            sliding_window=sliding_window,
            max_window_layers=max_window_layers,
            layer_types=layer_types,
            qkv_bias=qkv_bias,
            num_experts=num_experts,
            num_experts_per_tok=num_experts_per_tok,
            moe_intermediate_size=moe_intermediate_size,
            shared_expert_intermediate_size=shared_expert_intermediate_size,
            norm_topk_prob=norm_topk_prob,
            decoder_sparse_step=decoder_sparse_step,
            mlp_only_layers=mlp_only_layers,
            window=window,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return (
            (
                'sparse_sliding'
                if i not in self.mlp_only_layers and self.num_experts > 0 and ((i + 1) % self.decoder_sparse_step == 0)
                else 'decoder_sliding'
            )
            if (
                self.layer_types[i] == 'sliding_attention'
                if self.layer_types
                else self.use_sliding_window and (i + 1) % 2 == 1 and (i < self.max_window_layers)
            )
            else (
                'sparse'
                if i not in self.mlp_only_layers and self.num_experts > 0 and ((i + 1) % self.decoder_sparse_step == 0)
                else 'decoder'
            )
        )
