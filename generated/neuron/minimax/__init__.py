# ==================================================================================================================
# GENERATED FROM specs/minimax.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/minimax.yaml --target neuron
# source hash (spec + templates + generator): 8eb40ba1c52fdebf
# ==================================================================================================================
"""MiniMax for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, MiniMaxConfig
from .factory import MiniMaxForCausalLMFactory
from .model import MiniMaxForCausalLM

CONFIG_CLASS = MiniMaxConfig
MODEL_CLASS = MiniMaxForCausalLM
FACTORY_CLASS = MiniMaxForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/minimax.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "MiniMaxConfig", "MiniMaxForCausalLM", "MiniMaxForCausalLMFactory",
]
