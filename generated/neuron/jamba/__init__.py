# ==================================================================================================================
# GENERATED FROM specs/jamba.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/jamba.yaml --target neuron
# source hash (spec + templates + generator): 5cda34398e1bf9d2
# ==================================================================================================================
"""Jamba for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, JambaConfig
from .factory import JambaForCausalLMFactory
from .model import JambaForCausalLM

CONFIG_CLASS = JambaConfig
MODEL_CLASS = JambaForCausalLM
FACTORY_CLASS = JambaForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/jamba.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "JambaConfig", "JambaForCausalLM", "JambaForCausalLMFactory",
]
