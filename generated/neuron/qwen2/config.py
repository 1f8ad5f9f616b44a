# ==================================================================================================================
# GENERATED FROM specs/qwen2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen2.yaml --target neuron
# source hash (spec + templates + generator): 1f6ec4bc1560a3c1
# ==================================================================================================================
"""Qwen2Config: the HF ``config.json`` fields specs/qwen2.yaml reads, typed, with the spec's defaults.

Serves: Qwen2ForCausalLM (model_type ``qwen2``). Reference: transformers/models/qwen2/modeling_qwen2.py.
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

ARCHITECTURES = ("Qwen2ForCausalLM",)


@dataclass(frozen=True)
class Qwen2Config(NeuronModelConfig):
    # NeuronModelConfig adds the keyword-only ``neuron_config`` field and ``from_configs(hf_config, neuron_config)``
    # (the vLLM Neuron guide's config contract, step 1a).
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
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "Qwen2Config":
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
        window = sliding_window if use_sliding_window else None
        if not (hidden_act == 'silu'):
            raise ConfigError(
                "specs/qwen2.yaml: hidden_act other than silu (the MLP's activation) is not generated by this spec"
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
            window=window,
        )

    def layer_block(self, i: int) -> str:
        """Block of layer ``i`` (spec ``layers.block_rule``)."""
        return (
            'sliding'
            if (
                self.layer_types[i] == 'sliding_attention'
                if self.layer_types
                else self.use_sliding_window and self.sliding_window is not None and (i >= self.max_window_layers)
            )
            else 'decoder'
        )
