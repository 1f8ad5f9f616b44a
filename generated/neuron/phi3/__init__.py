# ==================================================================================================================
# GENERATED FROM specs/phi3.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/phi3.yaml --target neuron
# source hash (spec + templates + generator): bf8b015ba8b29a82
# ==================================================================================================================
"""Phi3 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Phi3Config
from .factory import Phi3ForCausalLMFactory
from .model import Phi3ForCausalLM

CONFIG_CLASS = Phi3Config
MODEL_CLASS = Phi3ForCausalLM
FACTORY_CLASS = Phi3ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/phi3.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Phi3Config", "Phi3ForCausalLM", "Phi3ForCausalLMFactory",
]
