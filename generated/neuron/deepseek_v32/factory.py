# ==================================================================================================================
# GENERATED FROM specs/deepseek_v32.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/deepseek_v32.yaml --target neuron
# source hash (spec + templates + generator): cc55a073c0906176
# ==================================================================================================================
"""Factory for vLLM's ModelRegistry (the vLLM Neuron guide, step 1c): validates the HF config and the NeuronConfig,
selects the implementation, delegates ``forward``."""
from __future__ import annotations

from typing import Any

from torch import nn

from modelgen.runtime.targets.neuron.config import NeuronConfig

from .config import ARCHITECTURES, DeepseekV32Config


class DeepseekV32ForCausalLMFactory(nn.Module):
    """Selects the implementation for a config; registered under DeepseekV32ForCausalLM.

    ``DeepseekV32ForCausalLMFactory(hf_config, neuron_config)`` wraps the selected model and forwards to it;
    ``from_configs(hf_config, neuron_config)`` returns the model itself (its parameter names are the checkpoint
    mapping's). One implementation is generated (weights in the model dtype; quantized checkpoints are dequantized
    at load), so the selection is the validation."""

    def __init__(self, hf_config: Any, neuron_config: NeuronConfig | None = None) -> None:
        super().__init__()
        self._model = self._select_implementation(hf_config, neuron_config)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._model(*args, **kwargs)

    @classmethod
    def from_configs(cls, hf_config: Any, neuron_config: NeuronConfig | None = None) -> nn.Module:
        return cls._select_implementation(hf_config, neuron_config)

    @classmethod
    def _select_implementation(cls, hf_config: Any, neuron_config: NeuronConfig | None) -> nn.Module:
        cls._validate_config(hf_config, neuron_config)
        from .model import DeepseekV32ForCausalLM

        return DeepseekV32ForCausalLM(DeepseekV32Config.from_configs(hf_config, neuron_config))

    @classmethod
    def _validate_config(cls, hf_config: Any, neuron_config: NeuronConfig | None) -> None:
        if isinstance(hf_config, dict):
            architectures = hf_config.get("architectures") or []
        else:
            architectures = getattr(hf_config, "architectures", None) or []
        unknown = [a for a in architectures if a not in ARCHITECTURES]
        if unknown:
            raise ValueError(f"{cls.__name__} serves {ARCHITECTURES}, not {unknown}")
        config = DeepseekV32Config.from_configs(hf_config, neuron_config)
        if config.kv_lora_rank <= 0 or config.qk_rope_head_dim <= 0 or config.qk_rope_head_dim % 2:
            raise ValueError("kv_lora_rank must be positive and qk_rope_head_dim a positive even number (RoPE pairs)")
        if neuron_config is None:
            return
        if neuron_config.data_parallel:
            raise ValueError(f"{cls.__name__}: component data parallelism {neuron_config.data_parallel} is not "
                             f"generated (every component is tensor-parallel over tp_degree)")
