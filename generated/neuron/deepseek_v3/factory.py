# ==================================================================================================================
# GENERATED FROM specs/deepseek_v3.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/deepseek_v3.yaml --target neuron
# source hash (spec + templates + generator): f585fe6686e4df42
# ==================================================================================================================
"""Factory for vLLM's ModelRegistry: validates the HF config, then builds DeepseekV3ForCausalLM."""
from __future__ import annotations

from typing import Any

from torch import nn

from .config import ARCHITECTURES, DeepseekV3Config


class DeepseekV3ForCausalLMFactory(nn.Module):
    """Selects the implementation for a config; registered under
    DeepseekV3ForCausalLM."""

    @classmethod
    def from_configs(cls, hf_config: Any, neuron_config: Any = None) -> nn.Module:
        config = DeepseekV3Config.from_hf_config(hf_config)
        cls._validate_config(hf_config, config)
        from .model import DeepseekV3ForCausalLM

        return DeepseekV3ForCausalLM(config)

    @classmethod
    def _validate_config(cls, hf_config: Any, config: DeepseekV3Config) -> None:
        if isinstance(hf_config, dict):
            architectures = hf_config.get("architectures") or []
        else:
            architectures = getattr(hf_config, "architectures", None) or []
        unknown = [a for a in architectures if a not in ARCHITECTURES]
        if unknown:
            raise ValueError(f"{cls.__name__} serves {ARCHITECTURES}, not {unknown}")
        if config.kv_lora_rank <= 0 or config.qk_rope_head_dim <= 0 or config.qk_rope_head_dim % 2:
            raise ValueError("kv_lora_rank must be positive and qk_rope_head_dim a positive even number (RoPE pairs)")
