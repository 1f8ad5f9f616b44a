# ==================================================================================================================
# GENERATED FROM specs/exaone4.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/exaone4.yaml --target neuron
# source hash (spec + templates + generator): ab937a67084b1e37
# ==================================================================================================================
"""Exaone4 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Exaone4Config
from .factory import Exaone4ForCausalLMFactory
from .model import Exaone4ForCausalLM

CONFIG_CLASS = Exaone4Config
MODEL_CLASS = Exaone4ForCausalLM
FACTORY_CLASS = Exaone4ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/exaone4.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Exaone4Config", "Exaone4ForCausalLM", "Exaone4ForCausalLMFactory",
]
