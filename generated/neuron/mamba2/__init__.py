# ==================================================================================================================
# GENERATED FROM specs/mamba2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/mamba2.yaml --target neuron
# source hash (spec + templates + generator): 73ebf23d376a50aa
# ==================================================================================================================
"""Mamba2 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Mamba2Config
from .factory import Mamba2ForCausalLMFactory
from .model import Mamba2ForCausalLM

CONFIG_CLASS = Mamba2Config
MODEL_CLASS = Mamba2ForCausalLM
FACTORY_CLASS = Mamba2ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/mamba2.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Mamba2Config", "Mamba2ForCausalLM", "Mamba2ForCausalLMFactory",
]
