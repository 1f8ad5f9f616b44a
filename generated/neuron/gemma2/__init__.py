# ==================================================================================================================
# GENERATED FROM specs/gemma2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/gemma2.yaml --target neuron
# source hash (spec + templates + generator): 10bb1901c2188355
# ==================================================================================================================
"""Gemma2 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Gemma2Config
from .factory import Gemma2ForCausalLMFactory
from .model import Gemma2ForCausalLM

CONFIG_CLASS = Gemma2Config
MODEL_CLASS = Gemma2ForCausalLM
FACTORY_CLASS = Gemma2ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/gemma2.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Gemma2Config", "Gemma2ForCausalLM", "Gemma2ForCausalLMFactory",
]
