# ==================================================================================================================
# GENERATED FROM specs/mamba.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/mamba.yaml --target neuron
# source hash (spec + templates + generator): 459784f62379ca15
# ==================================================================================================================
"""Mamba for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, MambaConfig
from .factory import MambaForCausalLMFactory
from .model import MambaForCausalLM

CONFIG_CLASS = MambaConfig
MODEL_CLASS = MambaForCausalLM
FACTORY_CLASS = MambaForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/mamba.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "MambaConfig", "MambaForCausalLM", "MambaForCausalLMFactory",
]
