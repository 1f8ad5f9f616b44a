# ==================================================================================================================
# GENERATED FROM specs/zamba2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/zamba2.yaml --target neuron
# source hash (spec + templates + generator): 0affc9e7e816ac16
# ==================================================================================================================
"""Zamba2Config: the HF ``config.json`` fields specs/zamba2.yaml reads, typed, with the spec's defaults.

Serves: Zamba2ForCausalLM (model_type ``zamba2``). Reference: transformers/models/zamba2/modeling_zamba2.py.
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
from modelgen.runtime.targets.neuron.config import NeuronModelConfig

ARCHITECTURES = ("Zamba2ForCausalLM",)


@dataclass(frozen=True)
class Zamba2Config(NeuronModelConfig):
    # NeuronModelConfig adds the keyword-only ``neuron_config`` field and ``from_configs(hf_config, neuron_config)``
    # (the vLLM Neuron guide's config contract, step 1a).
    vocab_size: int
    hidden_size: int
    layers_block_type: list[str]
    rms_norm_eps: float
    tie_word_embeddings: bool
    num_mem_blocks: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    hidden_act: str
    add_bias_linear: bool
    use_shared_attention_adapter: bool
    adapter_rank: int
    use_mem_rope: bool
    use_long_context: bool
    max_position_embeddings: int
    rope_theta: float  # config.json: rope_parameters.rope_theta or rope_theta
    rope_scaling: dict[str, Any] | None  # config.json: rope_parameters or rope_scaling
    n_mamba_heads: int
    mamba_ngroups: int
    mamba_d_state: int
    mamba_d_conv: int
    mamba_expand: int
    chunk_size: int
    time_step_min: float
    schedule: Any  # derived: layers_block_type or []
    kv_heads: Any  # derived: num_key_value_heads if num_key_value_heads is not None else num_attention_heads
    mlp_width: Any  # derived: intermediate_size if intermediate_size is not None else 4 * hidden_size
    attention_head_dim: Any  # derived: 2 * hidden_size // num_attention_heads
    mamba_head_dim: Any  # derived: mamba_expand * hidden_size // n_mamba_heads

    # config.json keys read above (dotted = inside a mapping) and keys the spec declares irrelevant (config_ignore);
    # modelgen.runtime.hf_config.check_config_keys reports any other key, which this model would not honour.
    CONFIG_KEYS_READ: ClassVar[tuple[str, ...]] = (
        "vocab_size",
        "hidden_size",
        "layers_block_type",
        "rms_norm_eps",
        "tie_word_embeddings",
        "num_mem_blocks",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "hidden_act",
        "add_bias_linear",
        "use_shared_attention_adapter",
        "adapter_rank",
        "use_mem_rope",
        "use_long_context",
        "max_position_embeddings",
        "rope_parameters.rope_theta",
        "rope_theta",
        "rope_parameters",
        "rope_scaling",
        "n_mamba_heads",
        "mamba_ngroups",
        "mamba_d_state",
        "mamba_d_conv",
        "mamba_expand",
        "chunk_size",
        "time_step_min",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "num_hidden_layers",
        "hybrid_layer_ids",
        "attention_hidden_size",
        "attention_head_dim",
        "mamba_headdim",
        "kv_channels",
        "num_query_groups",
        "use_conv_bias",
        "time_step_max",
        "time_step_floor",
        "use_mamba_kernels",
        "use_mem_eff_path",
        "num_logits_to_keep",
        "use_shared_mlp_adapter",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "Zamba2Config":
        """Build from a parsed ``config.json`` dict or a transformers ``PretrainedConfig``."""
        cfg = as_dict(hf_config)
        vocab_size = require("vocab_size", ("vocab_size",), read_int(cfg, "vocab_size", ("vocab_size",)))
        hidden_size = require("hidden_size", ("hidden_size",), read_int(cfg, "hidden_size", ("hidden_size",)))
        layers_block_type = read_str_list(cfg, "layers_block_type", ("layers_block_type",))
        rms_norm_eps = read_float(cfg, "rms_norm_eps", ("rms_norm_eps",))
        if rms_norm_eps is None:
            rms_norm_eps = 1e-05
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = True
        num_mem_blocks = read_int(cfg, "num_mem_blocks", ("num_mem_blocks",))
        if num_mem_blocks is None:
            num_mem_blocks = 1
        num_attention_heads = read_int(cfg, "num_attention_heads", ("num_attention_heads",))
        if num_attention_heads is None:
            num_attention_heads = 32
        num_key_value_heads = read_int(cfg, "num_key_value_heads", ("num_key_value_heads",))
        intermediate_size = read_int(cfg, "intermediate_size", ("intermediate_size",))
        hidden_act = read_str(cfg, "hidden_act", ("hidden_act",))
        if hidden_act is None:
            hidden_act = "gelu"
        add_bias_linear = read_bool(cfg, "add_bias_linear", ("add_bias_linear",))
        if add_bias_linear is None:
            add_bias_linear = False
        use_shared_attention_adapter = read_bool(cfg, "use_shared_attention_adapter", ("use_shared_attention_adapter",))
        if use_shared_attention_adapter is None:
            use_shared_attention_adapter = False
        adapter_rank = read_int(cfg, "adapter_rank", ("adapter_rank",))
        if adapter_rank is None:
            adapter_rank = 128
        use_mem_rope = read_bool(cfg, "use_mem_rope", ("use_mem_rope",))
        if use_mem_rope is None:
            use_mem_rope = False
        use_long_context = read_bool(cfg, "use_long_context", ("use_long_context",))
        if use_long_context is None:
            use_long_context = False
        max_position_embeddings = read_int(cfg, "max_position_embeddings", ("max_position_embeddings",))
        if max_position_embeddings is None:
            max_position_embeddings = 4096
        rope_theta = read_float(cfg, "rope_theta", ("rope_parameters.rope_theta", "rope_theta"))
        if rope_theta is None:
            rope_theta = 10000.0
        rope_scaling = read_rope_scaling(cfg, "rope_scaling", ("rope_parameters", "rope_scaling"))
        n_mamba_heads = read_int(cfg, "n_mamba_heads", ("n_mamba_heads",))
        if n_mamba_heads is None:
            n_mamba_heads = 8
        mamba_ngroups = read_int(cfg, "mamba_ngroups", ("mamba_ngroups",))
        if mamba_ngroups is None:
            mamba_ngroups = 1
        mamba_d_state = read_int(cfg, "mamba_d_state", ("mamba_d_state",))
        if mamba_d_state is None:
            mamba_d_state = 64
        mamba_d_conv = read_int(cfg, "mamba_d_conv", ("mamba_d_conv",))
        if mamba_d_conv is None:
            mamba_d_conv = 4
        mamba_expand = read_int(cfg, "mamba_expand", ("mamba_expand",))
        if mamba_expand is None:
            mamba_expand = 2
        chunk_size = read_int(cfg, "chunk_size", ("chunk_size",))
        if chunk_size is None:
            chunk_size = 256
        time_step_min = read_float(cfg, "time_step_min", ("time_step_min",))
        if time_step_min is None:
            time_step_min = 0.001
        schedule = layers_block_type or []
        kv_heads = num_key_value_heads if num_key_value_heads is not None else num_attention_heads
        mlp_width = intermediate_size if intermediate_size is not None else 4 * hidden_size
        attention_head_dim = 2 * hidden_size // num_attention_heads
        mamba_head_dim = mamba_expand * hidden_size // n_mamba_heads
        if not (layers_block_type is not None):
            raise ConfigError(
                "specs/zamba2.yaml: layers_block_type is not set: no layer schedule (Zamba2Config writes it; its "
                "54-layer default is not generated)",
            )
        if not (hidden_act == 'gelu'):
            raise ConfigError(
                "specs/zamba2.yaml: hidden_act other than gelu (the shared MLP's activation) is not generated by "
                "this spec",
            )
        if not (mamba_expand * hidden_size % n_mamba_heads == 0):
            raise ConfigError(
                "specs/zamba2.yaml: mamba_expand * hidden_size must be a multiple of n_mamba_heads (the Mamba-2 "
                "head width)",
            )
        if not (n_mamba_heads % mamba_ngroups == 0):
            raise ConfigError(
                "specs/zamba2.yaml: n_mamba_heads must be a multiple of mamba_ngroups (each group of B / C serves "
                "whole heads)",
            )
        if not (mamba_d_conv >= 2):
            raise ConfigError(
                "specs/zamba2.yaml: mamba_d_conv below 2 leaves the conv no history to keep (a one-tap kernel is "
                "not generated)",
            )
        if not (2 * hidden_size % num_attention_heads == 0):
            raise ConfigError(
                "specs/zamba2.yaml: 2 * hidden_size must be a multiple of num_attention_heads (the shared "
                "attention's head width)",
            )
        if not (not use_shared_attention_adapter or kv_heads == num_attention_heads):
            raise ConfigError(
                "specs/zamba2.yaml: use_shared_attention_adapter with num_key_value_heads != num_attention_heads: "
                "the k/v adapters are 2 * hidden_size wide (transformers fails too)",
            )
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            layers_block_type=layers_block_type,
            rms_norm_eps=rms_norm_eps,
            tie_word_embeddings=tie_word_embeddings,
            num_mem_blocks=num_mem_blocks,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            intermediate_size=intermediate_size,
            hidden_act=hidden_act,
            add_bias_linear=add_bias_linear,
            use_shared_attention_adapter=use_shared_attention_adapter,
            adapter_rank=adapter_rank,
            use_mem_rope=use_mem_rope,
            use_long_context=use_long_context,
            max_position_embeddings=max_position_embeddings,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            n_mamba_heads=n_mamba_heads,
            mamba_ngroups=mamba_ngroups,
            mamba_d_state=mamba_d_state,
            mamba_d_conv=mamba_d_conv,
            mamba_expand=mamba_expand,
            chunk_size=chunk_size,
            time_step_min=time_step_min,
            schedule=schedule,
            kv_heads=kv_heads,
            mlp_width=mlp_width,
            attention_head_dim=attention_head_dim,
            mamba_head_dim=mamba_head_dim,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return 'hybrid' if self.schedule[i] == 'hybrid' else 'mamba'
