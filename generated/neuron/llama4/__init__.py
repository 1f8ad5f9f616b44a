# ==================================================================================================================
# GENERATED FROM specs/llama4.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/llama4.yaml --target neuron
# source hash (spec + templates + generator): 19628cc76f58aab4
# ==================================================================================================================
"""Llama4 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Llama4Config
from .factory import Llama4ForCausalLMFactory
from .model import Llama4ForCausalLM

CONFIG_CLASS = Llama4Config
MODEL_CLASS = Llama4ForCausalLM
FACTORY_CLASS = Llama4ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/llama4.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Llama4Config", "Llama4ForCausalLM", "Llama4ForCausalLMFactory",
]
