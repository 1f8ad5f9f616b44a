# ==================================================================================================================
# GENERATED FROM specs/olmo2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/olmo2.yaml --target neuron
# source hash (spec + templates + generator): fcbba8870e6be22f
# ==================================================================================================================
"""Olmo2 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Olmo2Config
from .factory import Olmo2ForCausalLMFactory
from .model import Olmo2ForCausalLM

CONFIG_CLASS = Olmo2Config
MODEL_CLASS = Olmo2ForCausalLM
FACTORY_CLASS = Olmo2ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/olmo2.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Olmo2Config", "Olmo2ForCausalLM", "Olmo2ForCausalLMFactory",
]
