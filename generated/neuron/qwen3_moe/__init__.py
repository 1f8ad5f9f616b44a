# ==================================================================================================================
# GENERATED FROM specs/qwen3_moe.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen3_moe.yaml --target neuron
# source hash (spec + templates + generator): 48f38b72783e1105
# ==================================================================================================================
"""Qwen3Moe for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Qwen3MoeConfig
from .factory import Qwen3MoeForCausalLMFactory
from .model import Qwen3MoeForCausalLM

CONFIG_CLASS = Qwen3MoeConfig
MODEL_CLASS = Qwen3MoeForCausalLM
FACTORY_CLASS = Qwen3MoeForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/qwen3_moe.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Qwen3MoeConfig", "Qwen3MoeForCausalLM", "Qwen3MoeForCausalLMFactory",
]
