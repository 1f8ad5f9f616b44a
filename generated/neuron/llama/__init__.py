# ==================================================================================================================
# GENERATED FROM specs/llama.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/llama.yaml --target neuron
# source hash (spec + templates + generator): 4a496daff8ff2f72
# ==================================================================================================================
"""Llama for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, LlamaConfig
from .factory import LlamaForCausalLMFactory
from .model import LlamaForCausalLM

CONFIG_CLASS = LlamaConfig
MODEL_CLASS = LlamaForCausalLM
FACTORY_CLASS = LlamaForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/llama.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "LlamaConfig", "LlamaForCausalLM", "LlamaForCausalLMFactory",
]
