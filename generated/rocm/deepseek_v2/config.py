# ==================================================================================================================
# GENERATED FROM specs/deepseek_v2.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/deepseek_v2.yaml --target rocm
# source hash (spec + templates + generator): 5fd290e32d6c3b46
# ==================================================================================================================
"""DeepseekV2Config: the HF ``config.json`` fields specs/deepseek_v2.yaml reads, typed, with the spec's defaults.

Serves: DeepseekV2ForCausalLM (model_type ``deepseek_v2``). Reference:
transformers/models/deepseek_v2/modeling_deepseek_v2.py.
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

ARCHITECTURES = ("DeepseekV2ForCausalLM",)


@dataclass(frozen=True)
class DeepseekV2Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float  # config.json: rope_theta or rope_parameters.rope_theta
    rope_scaling: dict[str, Any] | None  # config.json: rope_parameters or rope_scaling
    attention_bias: bool
    tie_word_embeddings: bool
    n_routed_experts: int  # config.json: n_routed_experts or num_local_experts
    num_experts_per_tok: int
    moe_intermediate_size: int
    n_shared_experts: int
    n_group: int
    topk_group: int
    routed_scaling_factor: float
    first_k_dense_replace: int
    hidden_act: str
    num_nextn_predict_layers: int  # config.json: num_nextn_predict_layers or num_mtp_layers
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    topk_method: str
    mlp_bias: bool
    expert_groups: Any  # derived: n_group if topk_method == 'group_limited_greedy' else None

    # config.json keys read above (dotted = inside a mapping) and keys the spec declares irrelevant (config_ignore);
    # modelgen.runtime.hf_config.check_config_keys reports any other key, which this model would not honour.
    CONFIG_KEYS_READ: ClassVar[tuple[str, ...]] = (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "max_position_embeddings",
        "rms_norm_eps",
        "rope_theta",
        "rope_parameters.rope_theta",
        "rope_parameters",
        "rope_scaling",
        "attention_bias",
        "tie_word_embeddings",
        "n_routed_experts",
        "num_local_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "n_shared_experts",
        "n_group",
        "topk_group",
        "routed_scaling_factor",
        "first_k_dense_replace",
        "hidden_act",
        "num_nextn_predict_layers",
        "num_mtp_layers",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
        "topk_method",
        "mlp_bias",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "pretraining_tp",
        "head_dim",
        "qk_head_dim",
        "num_key_value_heads",
        "norm_topk_prob",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "DeepseekV2Config":
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
        n_routed_experts = read_int(cfg, "n_routed_experts", ("n_routed_experts", "num_local_experts"))
        if n_routed_experts is None:
            n_routed_experts = 64
        num_experts_per_tok = read_int(cfg, "num_experts_per_tok", ("num_experts_per_tok",))
        if num_experts_per_tok is None:
            num_experts_per_tok = 8
        moe_intermediate_size = read_int(cfg, "moe_intermediate_size", ("moe_intermediate_size",))
        if moe_intermediate_size is None:
            moe_intermediate_size = 1407
        n_shared_experts = read_int(cfg, "n_shared_experts", ("n_shared_experts",))
        if n_shared_experts is None:
            n_shared_experts = 2
        n_group = read_int(cfg, "n_group", ("n_group",))
        topk_group = read_int(cfg, "topk_group", ("topk_group",))
        routed_scaling_factor = read_float(cfg, "routed_scaling_factor", ("routed_scaling_factor",))
        if routed_scaling_factor is None:
            routed_scaling_factor = 1.0
        first_k_dense_replace = read_int(cfg, "first_k_dense_replace", ("first_k_dense_replace",))
        if first_k_dense_replace is None:
            first_k_dense_replace = 0
        hidden_act = read_str(cfg, "hidden_act", ("hidden_act",))
        if hidden_act is None:
            hidden_act = "silu"
        num_nextn_predict_layers = read_int(
            cfg, "num_nextn_predict_layers", ("num_nextn_predict_layers", "num_mtp_layers")
        )
        if num_nextn_predict_layers is None:
            num_nextn_predict_layers = 0
        q_lora_rank = read_int(cfg, "q_lora_rank", ("q_lora_rank",))
        kv_lora_rank = read_int(cfg, "kv_lora_rank", ("kv_lora_rank",))
        if kv_lora_rank is None:
            kv_lora_rank = 512
        qk_nope_head_dim = read_int(cfg, "qk_nope_head_dim", ("qk_nope_head_dim",))
        if qk_nope_head_dim is None:
            qk_nope_head_dim = 128
        qk_rope_head_dim = read_int(cfg, "qk_rope_head_dim", ("qk_rope_head_dim",))
        if qk_rope_head_dim is None:
            qk_rope_head_dim = 64
        v_head_dim = read_int(cfg, "v_head_dim", ("v_head_dim",))
        if v_head_dim is None:
            v_head_dim = 128
        topk_method = read_str(cfg, "topk_method", ("topk_method",))
        if topk_method is None:
            topk_method = "greedy"
        mlp_bias = read_bool(cfg, "mlp_bias", ("mlp_bias",))
        if mlp_bias is None:
            mlp_bias = False
        expert_groups = n_group if topk_method == 'group_limited_greedy' else None
        if not (topk_method in ['greedy', 'group_limited_greedy']):
            raise ConfigError("specs/deepseek_v2.yaml: topk_method must be greedy or group_limited_greedy")
        if not (topk_method == 'greedy' or (n_group is not None and topk_group is not None)):
            raise ConfigError("specs/deepseek_v2.yaml: topk_method group_limited_greedy needs n_group and topk_group")
        if mlp_bias:
            raise ConfigError("specs/deepseek_v2.yaml: MLP biases (mlp_bias) are not generated for DeepSeek-V2")
        if not (hidden_act == 'silu'):
            raise ConfigError(
                "specs/deepseek_v2.yaml: hidden_act other than silu (the MLP's activation) is not generated by this "
                "spec",
            )
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            max_position_embeddings=max_position_embeddings,
            rms_norm_eps=rms_norm_eps,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            attention_bias=attention_bias,
            tie_word_embeddings=tie_word_embeddings,
            n_routed_experts=n_routed_experts,
            num_experts_per_tok=num_experts_per_tok,
            moe_intermediate_size=moe_intermediate_size,
            n_shared_experts=n_shared_experts,
            n_group=n_group,
            topk_group=topk_group,
            routed_scaling_factor=routed_scaling_factor,
            first_k_dense_replace=first_k_dense_replace,
            hidden_act=hidden_act,
            num_nextn_predict_layers=num_nextn_predict_layers,
            q_lora_rank=q_lora_rank,
            kv_lora_rank=kv_lora_rank,
            qk_nope_head_dim=qk_nope_head_dim,
            qk_rope_head_dim=qk_rope_head_dim,
            v_head_dim=v_head_dim,
            topk_method=topk_method,
            mlp_bias=mlp_bias,
            expert_groups=expert_groups,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return 'sparse' if i >= self.first_k_dense_replace else 'dense'
