# ==================================================================================================================
# GENERATED FROM specs/qwen3_5.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen3_5.yaml --target neuron
# source hash (spec + templates + generator): 276b47a7d839ff20
# ==================================================================================================================
"""Qwen35 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Qwen35Config
from .factory import Qwen35ForCausalLMFactory
from .model import Qwen35ForCausalLM

CONFIG_CLASS = Qwen35Config
MODEL_CLASS = Qwen35ForCausalLM
FACTORY_CLASS = Qwen35ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/qwen3_5.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Qwen35Config", "Qwen35ForCausalLM", "Qwen35ForCausalLMFactory",
]
