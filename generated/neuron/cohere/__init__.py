# ==================================================================================================================
# GENERATED FROM specs/cohere.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/cohere.yaml --target neuron
# source hash (spec + templates + generator): 58eb8c17b12cfad0
# ==================================================================================================================
"""Cohere for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, CohereConfig
from .factory import CohereForCausalLMFactory
from .model import CohereForCausalLM

CONFIG_CLASS = CohereConfig
MODEL_CLASS = CohereForCausalLM
FACTORY_CLASS = CohereForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/cohere.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "CohereConfig", "CohereForCausalLM", "CohereForCausalLMFactory",
]
