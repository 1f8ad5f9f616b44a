# ==================================================================================================================
# GENERATED FROM specs/zamba2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/zamba2.yaml --target neuron
# source hash (spec + templates + generator): 0affc9e7e816ac16
# ==================================================================================================================
"""Zamba2 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Zamba2Config
from .factory import Zamba2ForCausalLMFactory
from .model import Zamba2ForCausalLM

CONFIG_CLASS = Zamba2Config
MODEL_CLASS = Zamba2ForCausalLM
FACTORY_CLASS = Zamba2ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/zamba2.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Zamba2Config", "Zamba2ForCausalLM", "Zamba2ForCausalLMFactory",
]
