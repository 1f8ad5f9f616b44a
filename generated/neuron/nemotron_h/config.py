# ==================================================================================================================
# GENERATED FROM specs/nemotron_h.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/nemotron_h.yaml --target neuron
# source hash (spec + templates + generator): fb5cb16d861c6a9b
# ==================================================================================================================
"""NemotronHConfig: the HF ``config.json`` fields specs/nemotron_h.yaml reads, typed, with the spec's defaults.

Serves: NemotronHForCausalLM (model_type ``nemotron_h``). Reference:
transformers/models/nemotron_h/modeling_nemotron_h.py.
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
    read_str,
    read_str_list,
    require,
)
from modelgen.runtime.targets.neuron.config import NeuronModelConfig

ARCHITECTURES = ("NemotronHForCausalLM",)


@dataclass(frozen=True)
class NemotronHConfig(NeuronModelConfig):
    # NeuronModelConfig adds the keyword-only ``neuron_config`` field and ``from_configs(hf_config, neuron_config)``
    # (the vLLM Neuron guide's config contract, step 1a).
    vocab_size: int
    hidden_size: int
    layers_block_type: list[str]
    hybrid_override_pattern: str
    num_hidden_layers: int
    layer_norm_epsilon: float
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    intermediate_size: int
    mlp_hidden_act: str
    mlp_bias: bool
    mamba_num_heads: int
    mamba_head_dim: int
    ssm_state_size: int
    n_groups: int  # config.json: n_groups or mamba_n_groups
    conv_kernel: int  # config.json: conv_kernel or mamba_d_conv
    chunk_size: int  # config.json: chunk_size or mamba_chunk_size
    use_conv_bias: bool  # config.json: use_conv_bias or mamba_conv_bias
    use_bias: bool
    mamba_hidden_act: str
    n_routed_experts: int  # config.json: n_routed_experts or num_local_experts
    moe_intermediate_size: int
    moe_shared_expert_intermediate_size: int
    moe_latent_size: int
    num_experts_per_tok: int
    routed_scaling_factor: float
    n_group: int
    topk_group: int
    norm_topk_prob: bool
    time_step_limit: list[float]  # config.json: time_step_limit or mamba_dt_limit
    schedule: Any  # derived: layers_block_type if layers_block_type is not None else hybrid_override_pattern or ''
    schedule_length: Any  # derived: len(schedule)
    has_moe_layers: Any  # derived: 'moe' in schedule or 'E' in schedule

    # config.json keys read above (dotted = inside a mapping) and keys the spec declares irrelevant (config_ignore);
    # modelgen.runtime.hf_config.check_config_keys reports any other key, which this model would not honour.
    CONFIG_KEYS_READ: ClassVar[tuple[str, ...]] = (
        "vocab_size",
        "hidden_size",
        "layers_block_type",
        "hybrid_override_pattern",
        "num_hidden_layers",
        "layer_norm_epsilon",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "intermediate_size",
        "mlp_hidden_act",
        "mlp_bias",
        "mamba_num_heads",
        "mamba_head_dim",
        "ssm_state_size",
        "n_groups",
        "mamba_n_groups",
        "conv_kernel",
        "mamba_d_conv",
        "chunk_size",
        "mamba_chunk_size",
        "use_conv_bias",
        "mamba_conv_bias",
        "use_bias",
        "mamba_hidden_act",
        "n_routed_experts",
        "num_local_experts",
        "moe_intermediate_size",
        "moe_shared_expert_intermediate_size",
        "moe_latent_size",
        "num_experts_per_tok",
        "routed_scaling_factor",
        "n_group",
        "topk_group",
        "norm_topk_prob",
        "time_step_limit",
        "mamba_dt_limit",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "expand",
        "mamba_expand",
        "time_step_min",
        "time_step_max",
        "time_step_floor",
        "mamba_dt_min",
        "mamba_dt_max",
        "mamba_dt_init_floor",
        "rescale_prenorm_residual",
        "residual_in_fp32",
        "mamba_proj_bias",
        "mamba_ssm_cache_dtype",
        "use_mamba_kernels",
        "attention_bias",
        "sliding_window",
        "num_logits_to_keep",
        "num_nextn_predict_layers",
        "mtp_layers_block_type",
        "mtp_hybrid_override_pattern",
        "n_shared_experts",
        "moe_shared_expert_overlap",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "NemotronHConfig":
        """Build from a parsed ``config.json`` dict or a transformers ``PretrainedConfig``."""
        cfg = as_dict(hf_config)
        vocab_size = require("vocab_size", ("vocab_size",), read_int(cfg, "vocab_size", ("vocab_size",)))
        hidden_size = require("hidden_size", ("hidden_size",), read_int(cfg, "hidden_size", ("hidden_size",)))
        layers_block_type = read_str_list(cfg, "layers_block_type", ("layers_block_type",))
        hybrid_override_pattern = read_str(cfg, "hybrid_override_pattern", ("hybrid_override_pattern",))
        num_hidden_layers = read_int(cfg, "num_hidden_layers", ("num_hidden_layers",))
        layer_norm_epsilon = read_float(cfg, "layer_norm_epsilon", ("layer_norm_epsilon",))
        if layer_norm_epsilon is None:
            layer_norm_epsilon = 1e-05
        num_attention_heads = read_int(cfg, "num_attention_heads", ("num_attention_heads",))
        if num_attention_heads is None:
            num_attention_heads = 32
        num_key_value_heads = read_int(cfg, "num_key_value_heads", ("num_key_value_heads",))
        if num_key_value_heads is None:
            num_key_value_heads = 8
        head_dim = read_int(cfg, "head_dim", ("head_dim",))
        if head_dim is None:
            head_dim = 128
        max_position_embeddings = read_int(cfg, "max_position_embeddings", ("max_position_embeddings",))
        if max_position_embeddings is None:
            max_position_embeddings = 4096
        intermediate_size = read_int(cfg, "intermediate_size", ("intermediate_size",))
        if intermediate_size is None:
            intermediate_size = 21504
        mlp_hidden_act = read_str(cfg, "mlp_hidden_act", ("mlp_hidden_act",))
        if mlp_hidden_act is None:
            mlp_hidden_act = "relu2"
        mlp_bias = read_bool(cfg, "mlp_bias", ("mlp_bias",))
        if mlp_bias is None:
            mlp_bias = False
        mamba_num_heads = read_int(cfg, "mamba_num_heads", ("mamba_num_heads",))
        if mamba_num_heads is None:
            mamba_num_heads = 128
        mamba_head_dim = read_int(cfg, "mamba_head_dim", ("mamba_head_dim",))
        if mamba_head_dim is None:
            mamba_head_dim = 64
        ssm_state_size = read_int(cfg, "ssm_state_size", ("ssm_state_size",))
        if ssm_state_size is None:
            ssm_state_size = 128
        n_groups = read_int(cfg, "n_groups", ("n_groups", "mamba_n_groups"))
        if n_groups is None:
            n_groups = 8
        conv_kernel = read_int(cfg, "conv_kernel", ("conv_kernel", "mamba_d_conv"))
        if conv_kernel is None:
            conv_kernel = 4
        chunk_size = read_int(cfg, "chunk_size", ("chunk_size", "mamba_chunk_size"))
        if chunk_size is None:
            chunk_size = 128
        use_conv_bias = read_bool(cfg, "use_conv_bias", ("use_conv_bias", "mamba_conv_bias"))
        if use_conv_bias is None:
            use_conv_bias = True
        use_bias = read_bool(cfg, "use_bias", ("use_bias",))
        if use_bias is None:
            use_bias = False
        mamba_hidden_act = read_str(cfg, "mamba_hidden_act", ("mamba_hidden_act",))
        if mamba_hidden_act is None:
            mamba_hidden_act = "silu"
        n_routed_experts = read_int(cfg, "n_routed_experts", ("n_routed_experts", "num_local_experts"))
        if n_routed_experts is None:
            n_routed_experts = 8
        moe_intermediate_size = read_int(cfg, "moe_intermediate_size", ("moe_intermediate_size",))
        if moe_intermediate_size is None:
            moe_intermediate_size = 7688
        moe_shared_expert_intermediate_size = read_int(
            cfg, "moe_shared_expert_intermediate_size", ("moe_shared_expert_intermediate_size",)
        )
        if moe_shared_expert_intermediate_size is None:
            moe_shared_expert_intermediate_size = 7688
        moe_latent_size = read_int(cfg, "moe_latent_size", ("moe_latent_size",))
        num_experts_per_tok = read_int(cfg, "num_experts_per_tok", ("num_experts_per_tok",))
        if num_experts_per_tok is None:
            num_experts_per_tok = 2
        routed_scaling_factor = read_float(cfg, "routed_scaling_factor", ("routed_scaling_factor",))
        if routed_scaling_factor is None:
            routed_scaling_factor = 1.0
        n_group = read_int(cfg, "n_group", ("n_group",))
        if n_group is None:
            n_group = 1
        topk_group = read_int(cfg, "topk_group", ("topk_group",))
        if topk_group is None:
            topk_group = 1
        norm_topk_prob = read_bool(cfg, "norm_topk_prob", ("norm_topk_prob",))
        if norm_topk_prob is None:
            norm_topk_prob = True
        time_step_limit = read_float_list(cfg, "time_step_limit", ("time_step_limit", "mamba_dt_limit"))
        if time_step_limit is None:
            time_step_limit = [0.0, float('inf')]
        schedule = layers_block_type if layers_block_type is not None else hybrid_override_pattern or ''
        schedule_length = len(schedule)
        has_moe_layers = 'moe' in schedule or 'E' in schedule
        if not (layers_block_type is not None or hybrid_override_pattern is not None):
            raise ConfigError(
                "specs/nemotron_h.yaml: neither layers_block_type nor hybrid_override_pattern is set: no layer schedule"
            )
        if not (moe_latent_size is None or not has_moe_layers):
            raise ConfigError(
                "specs/nemotron_h.yaml: moe_latent_size (the MoE layers' fc1/fc2 latent projection around the "
                "experts) is not generated by this spec",
            )
        if not (n_group >= 1 and n_routed_experts % n_group == 0 and (1 <= topk_group <= n_group)):
            raise ConfigError(
                "specs/nemotron_h.yaml: n_group must divide n_routed_experts and topk_group lie in 1..n_group "
                "(group-limited expert selection)",
            )
        if not (mlp_hidden_act == 'relu2'):
            raise ConfigError(
                "specs/nemotron_h.yaml: mlp_hidden_act other than relu2 (the MLP's activation) is not generated by "
                "this spec",
            )
        if not (mamba_hidden_act in ('silu', 'swish')):
            raise ConfigError(
                "specs/nemotron_h.yaml: mamba_hidden_act other than silu (the Mamba-2 conv's activation) is not "
                "generated by this spec",
            )
        if not (mamba_num_heads % n_groups == 0):
            raise ConfigError(
                "specs/nemotron_h.yaml: mamba_num_heads must be a multiple of n_groups (each group of B / C serves "
                "whole heads)",
            )
        if not (conv_kernel >= 2):
            raise ConfigError(
                "specs/nemotron_h.yaml: conv_kernel below 2 leaves the conv no history to keep (a one-tap kernel is "
                "not generated)",
            )
        if not (len(time_step_limit) == 2):
            raise ConfigError("specs/nemotron_h.yaml: time_step_limit must be a (min, max) pair")
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            layers_block_type=layers_block_type,
            hybrid_override_pattern=hybrid_override_pattern,
            num_hidden_layers=num_hidden_layers,
            layer_norm_epsilon=layer_norm_epsilon,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            head_dim=head_dim,
            max_position_embeddings=max_position_embeddings,
            intermediate_size=intermediate_size,
            mlp_hidden_act=mlp_hidden_act,
            mlp_bias=mlp_bias,
            mamba_num_heads=mamba_num_heads,
            mamba_head_dim=mamba_head_dim,
            ssm_state_size=ssm_state_size,
            n_groups=n_groups,
            conv_kernel=conv_kernel,
            chunk_size=chunk_size,
            use_conv_bias=use_conv_bias,
            use_bias=use_bias,
            mamba_hidden_act=mamba_hidden_act,
            n_routed_experts=n_routed_experts,
            moe_intermediate_size=moe_intermediate_size,
            moe_shared_expert_intermediate_size=moe_shared_expert_intermediate_size,
            moe_latent_size=moe_latent_size,
            num_experts_per_tok=num_experts_per_tok,
            routed_scaling_factor=routed_scaling_factor,
            n_group=n_group,
            topk_group=topk_group,
            norm_topk_prob=norm_topk_prob,
            time_step_limit=time_step_limit,
            schedule=schedule,
            schedule_length=schedule_length,
            has_moe_layers=has_moe_layers,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return (
            'mamba'
            if self.schedule[i] in ('linear_attention', 'mamba', 'M')
            else (
                'attention'
                if self.schedule[i] in ('full_attention', 'attention', '*')
                else ('moe' if self.schedule[i] in ('moe', 'E') else 'mlp')
            )
        )
