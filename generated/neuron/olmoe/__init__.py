# ==================================================================================================================
# GENERATED FROM specs/olmoe.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/olmoe.yaml --target neuron
# source hash (spec + templates + generator): 605953591b9610a0
# ==================================================================================================================
"""Olmoe for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, OlmoeConfig
from .factory import OlmoeForCausalLMFactory
from .model import OlmoeForCausalLM

CONFIG_CLASS = OlmoeConfig
MODEL_CLASS = OlmoeForCausalLM
FACTORY_CLASS = OlmoeForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/olmoe.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "OlmoeConfig", "OlmoeForCausalLM", "OlmoeForCausalLMFactory",
]
