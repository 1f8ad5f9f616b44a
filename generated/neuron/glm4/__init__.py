# ==================================================================================================================
# GENERATED FROM specs/glm4.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/glm4.yaml --target neuron
# source hash (spec + templates + generator): 3c1747e9dd8dc5d2
# ==================================================================================================================
"""Glm4 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Glm4Config
from .factory import Glm4ForCausalLMFactory
from .model import Glm4ForCausalLM

CONFIG_CLASS = Glm4Config
MODEL_CLASS = Glm4ForCausalLM
FACTORY_CLASS = Glm4ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/glm4.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Glm4Config", "Glm4ForCausalLM", "Glm4ForCausalLMFactory",
]
