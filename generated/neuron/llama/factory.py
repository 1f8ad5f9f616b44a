# ==================================================================================================================
# GENERATED FROM specs/llama.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/llama.yaml --target neuron
# source hash (spec + templates + generator): 7b09f291ed9ed8ed
# ==================================================================================================================
"""Factory for vLLM's ModelRegistry: validates the HF config, then builds LlamaForCausalLM."""
from __future__ import annotations

from typing import Any

from torch import nn

from .config import ARCHITECTURES, LlamaConfig


class LlamaForCausalLMFactory(nn.Module):
    """Selects the implementation for a config; registered under
    LlamaForCausalLM."""

    @classmethod
    def from_configs(cls, hf_config: Any, neuron_config: Any = None) -> nn.Module:
        config = LlamaConfig.from_hf_config(hf_config)
        cls._validate_config(hf_config, config)
        from .model import LlamaForCausalLM

        return LlamaForCausalLM(config)

    @classmethod
    def _validate_config(cls, hf_config: Any, config: LlamaConfig) -> None:
        if isinstance(hf_config, dict):
            architectures = hf_config.get("architectures") or []
        else:
            architectures = getattr(hf_config, "architectures", None) or []
        unknown = [a for a in architectures if a not in ARCHITECTURES]
        if unknown:
            raise ValueError(f"{cls.__name__} serves {ARCHITECTURES}, not {unknown}")
        if config.num_attention_heads % config.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads (GQA groups)")
