# ==================================================================================================================
# GENERATED FROM specs/deepseek_v32.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/deepseek_v32.yaml --target neuron
# source hash (spec + templates + generator): a47bfe6d0797e210
# ==================================================================================================================
"""Factory for vLLM's ModelRegistry: validates the HF config, then builds DeepseekV32ForCausalLM."""
from __future__ import annotations

from typing import Any

from torch import nn

from .config import ARCHITECTURES, DeepseekV32Config


class DeepseekV32ForCausalLMFactory(nn.Module):
    """Selects the implementation for a config; registered under
    DeepseekV32ForCausalLM."""

    @classmethod
    def from_configs(cls, hf_config: Any, neuron_config: Any = None) -> nn.Module:
        config = DeepseekV32Config.from_hf_config(hf_config)
        cls._validate_config(hf_config, config)
        from .model import DeepseekV32ForCausalLM

        return DeepseekV32ForCausalLM(config)

    @classmethod
    def _validate_config(cls, hf_config: Any, config: DeepseekV32Config) -> None:
        if isinstance(hf_config, dict):
            architectures = hf_config.get("architectures") or []
        else:
            architectures = getattr(hf_config, "architectures", None) or []
        unknown = [a for a in architectures if a not in ARCHITECTURES]
        if unknown:
            raise ValueError(f"{cls.__name__} serves {ARCHITECTURES}, not {unknown}")
        if config.kv_lora_rank <= 0 or config.qk_rope_head_dim <= 0 or config.qk_rope_head_dim % 2:
            raise ValueError("kv_lora_rank must be positive and qk_rope_head_dim a positive even number (RoPE pairs)")
