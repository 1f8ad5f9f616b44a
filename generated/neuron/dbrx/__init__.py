# ==================================================================================================================
# GENERATED FROM specs/dbrx.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/dbrx.yaml --target neuron
# source hash (spec + templates + generator): 51000dfa6911d58b
# ==================================================================================================================
"""Dbrx for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, DbrxConfig
from .factory import DbrxForCausalLMFactory
from .model import DbrxForCausalLM

CONFIG_CLASS = DbrxConfig
MODEL_CLASS = DbrxForCausalLM
FACTORY_CLASS = DbrxForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/dbrx.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "DbrxConfig", "DbrxForCausalLM", "DbrxForCausalLMFactory",
]
