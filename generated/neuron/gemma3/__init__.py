# ==================================================================================================================
# GENERATED FROM specs/gemma3.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/gemma3.yaml --target neuron
# source hash (spec + templates + generator): 2e05c38a053c1cea
# ==================================================================================================================
"""Gemma3 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Gemma3Config
from .factory import Gemma3ForCausalLMFactory
from .model import Gemma3ForCausalLM

CONFIG_CLASS = Gemma3Config
MODEL_CLASS = Gemma3ForCausalLM
FACTORY_CLASS = Gemma3ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/gemma3.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Gemma3Config", "Gemma3ForCausalLM", "Gemma3ForCausalLMFactory",
]
