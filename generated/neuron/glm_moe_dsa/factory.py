# ==================================================================================================================
# GENERATED FROM specs/glm_moe_dsa.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/glm_moe_dsa.yaml --target neuron
# source hash (spec + templates + generator): 709c302140b88d36
# ==================================================================================================================
"""Factory for vLLM's ModelRegistry: validates the HF config, then builds GlmMoeDsaForCausalLM."""
from __future__ import annotations

from typing import Any

from torch import nn

from .config import ARCHITECTURES, GlmMoeDsaConfig


class GlmMoeDsaForCausalLMFactory(nn.Module):
    """Selects the implementation for a config; registered under
    GlmMoeDsaForCausalLM."""

    @classmethod
    def from_configs(cls, hf_config: Any, neuron_config: Any = None) -> nn.Module:
        config = GlmMoeDsaConfig.from_hf_config(hf_config)
        cls._validate_config(hf_config, config)
        from .model import GlmMoeDsaForCausalLM

        return GlmMoeDsaForCausalLM(config)

    @classmethod
    def _validate_config(cls, hf_config: Any, config: GlmMoeDsaConfig) -> None:
        if isinstance(hf_config, dict):
            architectures = hf_config.get("architectures") or []
        else:
            architectures = getattr(hf_config, "architectures", None) or []
        unknown = [a for a in architectures if a not in ARCHITECTURES]
        if unknown:
            raise ValueError(f"{cls.__name__} serves {ARCHITECTURES}, not {unknown}")
        if config.kv_lora_rank <= 0 or config.qk_rope_head_dim <= 0 or config.qk_rope_head_dim % 2:
            raise ValueError("kv_lora_rank must be positive and qk_rope_head_dim a positive even number (RoPE pairs)")
