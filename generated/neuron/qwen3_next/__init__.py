# ==================================================================================================================
# GENERATED FROM specs/qwen3_next.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen3_next.yaml --target neuron
# source hash (spec + templates + generator): bb29085f76c04d70
# ==================================================================================================================
"""Qwen3Next for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Qwen3NextConfig
from .factory import Qwen3NextForCausalLMFactory
from .model import Qwen3NextForCausalLM

CONFIG_CLASS = Qwen3NextConfig
MODEL_CLASS = Qwen3NextForCausalLM
FACTORY_CLASS = Qwen3NextForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/qwen3_next.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Qwen3NextConfig", "Qwen3NextForCausalLM", "Qwen3NextForCausalLMFactory",
]
