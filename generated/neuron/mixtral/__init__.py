# ==================================================================================================================
# GENERATED FROM specs/mixtral.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/mixtral.yaml --target neuron
# source hash (spec + templates + generator): 1920e6ad85681262
# ==================================================================================================================
"""Mixtral for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, MixtralConfig
from .factory import MixtralForCausalLMFactory
from .model import MixtralForCausalLM

CONFIG_CLASS = MixtralConfig
MODEL_CLASS = MixtralForCausalLM
FACTORY_CLASS = MixtralForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/mixtral.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "MixtralConfig", "MixtralForCausalLM", "MixtralForCausalLMFactory",
]
