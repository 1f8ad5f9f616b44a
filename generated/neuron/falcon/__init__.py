# ==================================================================================================================
# GENERATED FROM specs/falcon.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/falcon.yaml --target neuron
# source hash (spec + templates + generator): ce49f39398f9c72e
# ==================================================================================================================
"""Falcon for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, FalconConfig
from .factory import FalconForCausalLMFactory
from .model import FalconForCausalLM

CONFIG_CLASS = FalconConfig
MODEL_CLASS = FalconForCausalLM
FACTORY_CLASS = FalconForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/falcon.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "FalconConfig", "FalconForCausalLM", "FalconForCausalLMFactory",
]
