# ==================================================================================================================
# GENERATED FROM specs/falcon.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/falcon.yaml --target neuron
# source hash (spec + templates + generator): ce49f39398f9c72e
# ==================================================================================================================
"""FalconConfig: the HF ``config.json`` fields specs/falcon.yaml reads, typed, with the spec's defaults.

Serves: FalconForCausalLM (model_type ``falcon``). Reference: transformers/models/falcon/modeling_falcon.py.
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
)
from modelgen.runtime.targets.neuron.config import NeuronModelConfig

ARCHITECTURES = ("FalconForCausalLM",)


@dataclass(frozen=True)
class FalconConfig(NeuronModelConfig):
    # NeuronModelConfig adds the keyword-only ``neuron_config`` field and ``from_configs(hf_config, neuron_config)``
    # (the vLLM Neuron guide's config contract, step 1a).
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int  # config.json: num_hidden_layers or n_layer
    num_attention_heads: int  # config.json: num_attention_heads or n_head
    max_position_embeddings: int
    rope_theta: float  # config.json: rope_theta or rope_parameters.rope_theta
    rope_scaling: dict[str, Any] | None  # config.json: rope_parameters or rope_scaling
    tie_word_embeddings: bool
    ffn_hidden_size: int
    num_kv_heads: int  # config.json: num_kv_heads or n_head_kv
    layer_norm_epsilon: float
    bias: bool
    activation: str
    new_decoder_architecture: bool
    multi_query: bool
    parallel_attn: bool
    num_ln_in_parallel_attn: int
    alibi: bool
    apply_residual_connection_post_layernorm: bool
    kv_heads: Any  # derived: num_kv_heads if new_decoder_architecture or not multi_query else 1
    falcon_head_dim: Any  # derived: hidden_size // num_attention_heads
    parallel_layer: Any  # derived: new_decoder_architecture or parallel_attn
    own_mlp_norm: Any  # derived: new_decoder_architecture and num_ln_in_parallel_attn != 1

    # config.json keys read above (dotted = inside a mapping) and keys the spec declares irrelevant (config_ignore);
    # modelgen.runtime.hf_config.check_config_keys reports any other key, which this model would not honour.
    CONFIG_KEYS_READ: ClassVar[tuple[str, ...]] = (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "n_layer",
        "num_attention_heads",
        "n_head",
        "max_position_embeddings",
        "rope_theta",
        "rope_parameters.rope_theta",
        "rope_parameters",
        "rope_scaling",
        "tie_word_embeddings",
        "ffn_hidden_size",
        "num_kv_heads",
        "n_head_kv",
        "layer_norm_epsilon",
        "bias",
        "activation",
        "new_decoder_architecture",
        "multi_query",
        "parallel_attn",
        "num_ln_in_parallel_attn",
        "alibi",
        "apply_residual_connection_post_layernorm",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "num_key_value_heads",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "FalconConfig":
        """Build from a parsed ``config.json`` dict or a transformers ``PretrainedConfig``."""
        cfg = as_dict(hf_config)
        vocab_size = read_int(cfg, "vocab_size", ("vocab_size",))
        if vocab_size is None:
            vocab_size = 65024
        hidden_size = read_int(cfg, "hidden_size", ("hidden_size",))
        if hidden_size is None:
            hidden_size = 4544
        num_hidden_layers = read_int(cfg, "num_hidden_layers", ("num_hidden_layers", "n_layer"))
        if num_hidden_layers is None:
            num_hidden_layers = 32
        num_attention_heads = read_int(cfg, "num_attention_heads", ("num_attention_heads", "n_head"))
        if num_attention_heads is None:
            num_attention_heads = 71
        max_position_embeddings = read_int(cfg, "max_position_embeddings", ("max_position_embeddings",))
        if max_position_embeddings is None:
            max_position_embeddings = 2048
        rope_theta = read_float(cfg, "rope_theta", ("rope_theta", "rope_parameters.rope_theta"))
        if rope_theta is None:
            rope_theta = 10000.0
        rope_scaling = read_rope_scaling(cfg, "rope_scaling", ("rope_parameters", "rope_scaling"))
        tie_word_embeddings = read_bool(cfg, "tie_word_embeddings", ("tie_word_embeddings",))
        if tie_word_embeddings is None:
            tie_word_embeddings = True
        ffn_hidden_size = read_int(cfg, "ffn_hidden_size", ("ffn_hidden_size",))
        if ffn_hidden_size is None:
            ffn_hidden_size = hidden_size * 4
        num_kv_heads = read_int(cfg, "num_kv_heads", ("num_kv_heads", "n_head_kv"))
        if num_kv_heads is None:
            num_kv_heads = num_attention_heads
        layer_norm_epsilon = read_float(cfg, "layer_norm_epsilon", ("layer_norm_epsilon",))
        if layer_norm_epsilon is None:
            layer_norm_epsilon = 1e-05
        bias = read_bool(cfg, "bias", ("bias",))
        if bias is None:
            bias = False
        activation = read_str(cfg, "activation", ("activation",))
        if activation is None:
            activation = "gelu"
        new_decoder_architecture = read_bool(cfg, "new_decoder_architecture", ("new_decoder_architecture",))
        if new_decoder_architecture is None:
            new_decoder_architecture = False
        multi_query = read_bool(cfg, "multi_query", ("multi_query",))
        if multi_query is None:
            multi_query = True
        parallel_attn = read_bool(cfg, "parallel_attn", ("parallel_attn",))
        if parallel_attn is None:
            parallel_attn = True
        num_ln_in_parallel_attn = read_int(cfg, "num_ln_in_parallel_attn", ("num_ln_in_parallel_attn",))
        alibi = read_bool(cfg, "alibi", ("alibi",))
        if alibi is None:
            alibi = False
        apply_residual_connection_post_layernorm = read_bool(
            cfg, "apply_residual_connection_post_layernorm", ("apply_residual_connection_post_layernorm",)
        )
        if apply_residual_connection_post_layernorm is None:
            apply_residual_connection_post_layernorm = False
        kv_heads = num_kv_heads if new_decoder_architecture or not multi_query else 1
        falcon_head_dim = hidden_size // num_attention_heads
        parallel_layer = new_decoder_architecture or parallel_attn
        own_mlp_norm = new_decoder_architecture and num_ln_in_parallel_attn != 1
        if not (activation in ('gelu', 'gelu_new', 'gelu_fast', 'gelu_pytorch_tanh', 'relu2')):
            raise ConfigError(
                "specs/falcon.yaml: activation other than gelu / gelu_new / gelu_fast / gelu_pytorch_tanh / relu2 "
                "is not generated",
            )
        if not (parallel_attn or not new_decoder_architecture):
            raise ConfigError(
                "specs/falcon.yaml: new_decoder_architecture with parallel_attn false builds no ln_attn in "
                "transformers either",
            )
        if not (num_ln_in_parallel_attn in (None, 1, 2) and (new_decoder_architecture or num_ln_in_parallel_attn != 2)):
            raise ConfigError(
                "specs/falcon.yaml: num_ln_in_parallel_attn 2 (ln_attn / ln_mlp) exists only with "
                "new_decoder_architecture",
            )
        if apply_residual_connection_post_layernorm:
            raise ConfigError(
                "specs/falcon.yaml: apply_residual_connection_post_layernorm (residual taken after the norm) is not "
                "generated",
            )
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            max_position_embeddings=max_position_embeddings,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            tie_word_embeddings=tie_word_embeddings,
            ffn_hidden_size=ffn_hidden_size,
            num_kv_heads=num_kv_heads,
            layer_norm_epsilon=layer_norm_epsilon,
            bias=bias,
            activation=activation,
            new_decoder_architecture=new_decoder_architecture,
            multi_query=multi_query,
            parallel_attn=parallel_attn,
            num_ln_in_parallel_attn=num_ln_in_parallel_attn,
            alibi=alibi,
            apply_residual_connection_post_layernorm=apply_residual_connection_post_layernorm,
            kv_heads=kv_heads,
            falcon_head_dim=falcon_head_dim,
            parallel_layer=parallel_layer,
            own_mlp_norm=own_mlp_norm,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return 'alibi' if self.alibi else 'decoder'
