# ==================================================================================================================
# GENERATED FROM specs/ernie4_5.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/ernie4_5.yaml --target neuron
# source hash (spec + templates + generator): 74d498222df81d22
# ==================================================================================================================
"""Ernie45 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Ernie45Config
from .factory import Ernie45ForCausalLMFactory
from .model import Ernie45ForCausalLM

CONFIG_CLASS = Ernie45Config
MODEL_CLASS = Ernie45ForCausalLM
FACTORY_CLASS = Ernie45ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/ernie4_5.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Ernie45Config", "Ernie45ForCausalLM", "Ernie45ForCausalLMFactory",
]
