# ==================================================================================================================
# GENERATED FROM specs/qwen3.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen3.yaml --target neuron
# source hash (spec + templates + generator): 4b09b0c64418f44b
# ==================================================================================================================
"""Qwen3 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Qwen3Config
from .factory import Qwen3ForCausalLMFactory
from .model import Qwen3ForCausalLM

CONFIG_CLASS = Qwen3Config
MODEL_CLASS = Qwen3ForCausalLM
FACTORY_CLASS = Qwen3ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/qwen3.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Qwen3Config", "Qwen3ForCausalLM", "Qwen3ForCausalLMFactory",
]
