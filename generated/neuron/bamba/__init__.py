# ==================================================================================================================
# GENERATED FROM specs/bamba.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/bamba.yaml --target neuron
# source hash (spec + templates + generator): 4a2ad3a1ea9ac77a
# ==================================================================================================================
"""Bamba for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, BambaConfig
from .factory import BambaForCausalLMFactory
from .model import BambaForCausalLM

CONFIG_CLASS = BambaConfig
MODEL_CLASS = BambaForCausalLM
FACTORY_CLASS = BambaForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/bamba.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "BambaConfig", "BambaForCausalLM", "BambaForCausalLMFactory",
]
