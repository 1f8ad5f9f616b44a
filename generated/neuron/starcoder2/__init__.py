# ==================================================================================================================
# GENERATED FROM specs/starcoder2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/starcoder2.yaml --target neuron
# source hash (spec + templates + generator): 28ed493bede862a2
# ==================================================================================================================
"""Starcoder2 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Starcoder2Config
from .factory import Starcoder2ForCausalLMFactory
from .model import Starcoder2ForCausalLM

CONFIG_CLASS = Starcoder2Config
MODEL_CLASS = Starcoder2ForCausalLM
FACTORY_CLASS = Starcoder2ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/starcoder2.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Starcoder2Config", "Starcoder2ForCausalLM", "Starcoder2ForCausalLMFactory",
]
