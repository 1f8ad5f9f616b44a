# ==================================================================================================================
# GENERATED FROM specs/glm4_moe.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/glm4_moe.yaml --target neuron
# source hash (spec + templates + generator): 8a95b4d8273e6bdf
# ==================================================================================================================
"""Glm4Moe for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Glm4MoeConfig
from .factory import Glm4MoeForCausalLMFactory
from .model import Glm4MoeForCausalLM

CONFIG_CLASS = Glm4MoeConfig
MODEL_CLASS = Glm4MoeForCausalLM
FACTORY_CLASS = Glm4MoeForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/glm4_moe.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Glm4MoeConfig", "Glm4MoeForCausalLM", "Glm4MoeForCausalLMFactory",
]
