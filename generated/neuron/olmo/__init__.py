# ==================================================================================================================
# GENERATED FROM specs/olmo.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/olmo.yaml --target neuron
# source hash (spec + templates + generator): c404c7d483270492
# ==================================================================================================================
"""Olmo for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, OlmoConfig
from .factory import OlmoForCausalLMFactory
from .model import OlmoForCausalLM

CONFIG_CLASS = OlmoConfig
MODEL_CLASS = OlmoForCausalLM
FACTORY_CLASS = OlmoForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/olmo.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "OlmoConfig", "OlmoForCausalLM", "OlmoForCausalLMFactory",
]
