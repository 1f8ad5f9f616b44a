# ==================================================================================================================
# GENERATED FROM specs/phi.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/phi.yaml --target neuron
# source hash (spec + templates + generator): 8e35530cc9db435c
# ==================================================================================================================
"""Phi for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, PhiConfig
from .factory import PhiForCausalLMFactory
from .model import PhiForCausalLM

CONFIG_CLASS = PhiConfig
MODEL_CLASS = PhiForCausalLM
FACTORY_CLASS = PhiForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/phi.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "PhiConfig", "PhiForCausalLM", "PhiForCausalLMFactory",
]
