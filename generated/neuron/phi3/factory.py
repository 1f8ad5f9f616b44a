# ==================================================================================================================
# GENERATED FROM specs/phi3.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/phi3.yaml --target neuron
# source hash (spec + templates + generator): 1cd9159feba0c442
# ==================================================================================================================
"""Factory for vLLM's ModelRegistry: validates the HF config, then builds Phi3ForCausalLM."""
from __future__ import annotations

from typing import Any

from torch import nn

from .config import ARCHITECTURES, Phi3Config


class Phi3ForCausalLMFactory(nn.Module):
    """Selects the implementation for a config; registered under
    Phi3ForCausalLM."""

    @classmethod
    def from_configs(cls, hf_config: Any, neuron_config: Any = None) -> nn.Module:
        config = Phi3Config.from_hf_config(hf_config)
        cls._validate_config(hf_config, config)
        from .model import Phi3ForCausalLM

        return Phi3ForCausalLM(config)

    @classmethod
    def _validate_config(cls, hf_config: Any, config: Phi3Config) -> None:
        if isinstance(hf_config, dict):
            architectures = hf_config.get("architectures") or []
        else:
            architectures = getattr(hf_config, "architectures", None) or []
        unknown = [a for a in architectures if a not in ARCHITECTURES]
        if unknown:
            raise ValueError(f"{cls.__name__} serves {ARCHITECTURES}, not {unknown}")
        if config.num_attention_heads % config.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads (GQA groups)")
