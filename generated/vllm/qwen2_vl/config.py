# ==================================================================================================================
# GENERATED FROM specs/qwen2_vl.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/qwen2_vl.yaml --target vllm
# source hash (spec + templates + generator): b9bb27481ce033f3
# ==================================================================================================================
"""Qwen2VLConfig: the HF ``config.json`` fields specs/qwen2_vl.yaml reads, typed, with the spec's defaults.

Serves: Qwen2VLForConditionalGeneration (model_type ``qwen2_vl``). Reference:
transformers/models/qwen2_vl/modeling_qwen2_vl.py.
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

ARCHITECTURES = ("Qwen2VLForConditionalGeneration",)


@dataclass(frozen=True)
class Qwen2VLConfig:
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
    tie_word_embeddings: bool
    hidden_act: str
    use_sliding_window: bool
    sliding_window: int
    max_window_layers: int
    layer_types: list[str]
    window: Any  # derived: sliding_window if use_sliding_window else None
    text_rope: Any  # derived: None if rope_scaling and rope_scaling['rope_type'] == 'mrope' else rope_scaling

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
        "tie_word_embeddings",
        "hidden_act",
        "use_sliding_window",
        "sliding_window",
        "max_window_layers",
        "layer_types",
    )
    CONFIG_KEYS_IGNORED: ClassVar[tuple[str, ...]] = (
        "vision_config",
        "image_token_id",
        "video_token_id",
        "vision_start_token_id",
        "vision_end_token_id",
        "rope_parameters.mrope_section",
)

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> "Qwen2VLConfig":
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
            num_key_value_heads = 8
        max_position_embeddings = read_int(cfg, "max_position_embeddings", ("max_position_embeddings",))
        if max_position_embeddings is None:
            max_position_embeddings = 32768
        rms_norm_eps = read_float(cfg, "rms_norm_eps", ("rms_norm_eps",))
        if rms_norm_eps is None:
            rms_norm_eps = 1e-05
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
        text_rope = None if rope_scaling and rope_scaling['rope_type'] == 'mrope' else rope_scaling
        if not (hidden_act == 'silu'):
            raise ConfigError(
                "specs/qwen2_vl.yaml: hidden_act other than silu (the MLP's activation) is not generated by this spec"
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
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            tie_word_embeddings=tie_word_embeddings,
            hidden_act=hidden_act,
            use_sliding_window=use_sliding_window,
            sliding_window=sliding_window,
            max_window_layers=max_window_layers,
            layer_types=layer_types,
            window=window,
            text_rope=text_rope,
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
