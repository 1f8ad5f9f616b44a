# ==================================================================================================================
# GENERATED FROM specs/granite.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/granite.yaml --target neuron
# source hash (spec + templates + generator): bb1edf329abaa59f
# ==================================================================================================================
"""Granite for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, GraniteConfig
from .factory import GraniteForCausalLMFactory
from .model import GraniteForCausalLM

CONFIG_CLASS = GraniteConfig
MODEL_CLASS = GraniteForCausalLM
FACTORY_CLASS = GraniteForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/granite.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "GraniteConfig", "GraniteForCausalLM", "GraniteForCausalLMFactory",
]
