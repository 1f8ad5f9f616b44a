# ==================================================================================================================
# GENERATED FROM specs/lfm2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/lfm2.yaml --target neuron
# source hash (spec + templates + generator): 08a06d2c1a1c3232
# ==================================================================================================================
"""Lfm2 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Lfm2Config
from .factory import Lfm2ForCausalLMFactory
from .model import Lfm2ForCausalLM

CONFIG_CLASS = Lfm2Config
MODEL_CLASS = Lfm2ForCausalLM
FACTORY_CLASS = Lfm2ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/lfm2.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Lfm2Config", "Lfm2ForCausalLM", "Lfm2ForCausalLMFactory",
]
