# ==================================================================================================================
# GENERATED FROM specs/qwen2_moe.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen2_moe.yaml --target neuron
# source hash (spec + templates + generator): fa40f83a283def67
# ==================================================================================================================
"""Factory for vLLM's ModelRegistry: validates the HF config, then builds Qwen2MoeForCausalLM."""
from __future__ import annotations

from typing import Any

from torch import nn

from .config import ARCHITECTURES, Qwen2MoeConfig


class Qwen2MoeForCausalLMFactory(nn.Module):
    """Selects the implementation for a config; registered under
    Qwen2MoeForCausalLM."""

    @classmethod
    def from_configs(cls, hf_config: Any, neuron_config: Any = None) -> nn.Module:
        config = Qwen2MoeConfig.from_hf_config(hf_config)
        cls._validate_config(hf_config, config)
        from .model import Qwen2MoeForCausalLM

        return Qwen2MoeForCausalLM(config)

    @classmethod
    def _validate_config(cls, hf_config: Any, config: Qwen2MoeConfig) -> None:
        if isinstance(hf_config, dict):
            architectures = hf_config.get("architectures") or []
        else:
            architectures = getattr(hf_config, "architectures", None) or []
        unknown = [a for a in architectures if a not in ARCHITECTURES]
        if unknown:
            raise ValueError(f"{cls.__name__} serves {ARCHITECTURES}, not {unknown}")
        if config.num_attention_heads % config.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads (GQA groups)")
        if config.num_attention_heads % config.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads (GQA groups)")
