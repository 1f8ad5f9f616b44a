# ==================================================================================================================
# GENERATED FROM specs/mistral.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/mistral.yaml --target neuron
# source hash (spec + templates + generator): 2c7b315196a71bd0
# ==================================================================================================================
"""Mistral for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, MistralConfig
from .factory import MistralForCausalLMFactory
from .model import MistralForCausalLM

CONFIG_CLASS = MistralConfig
MODEL_CLASS = MistralForCausalLM
FACTORY_CLASS = MistralForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/mistral.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "MistralConfig", "MistralForCausalLM", "MistralForCausalLMFactory",
]
