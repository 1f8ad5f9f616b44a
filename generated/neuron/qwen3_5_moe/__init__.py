# ==================================================================================================================
# GENERATED FROM specs/qwen3_5_moe.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen3_5_moe.yaml --target neuron
# source hash (spec + templates + generator): 105439931bad3ad5
# ==================================================================================================================
"""Qwen35Moe for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Qwen35MoeConfig
from .factory import Qwen35MoeForCausalLMFactory
from .model import Qwen35MoeForCausalLM

CONFIG_CLASS = Qwen35MoeConfig
MODEL_CLASS = Qwen35MoeForCausalLM
FACTORY_CLASS = Qwen35MoeForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/qwen3_5_moe.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Qwen35MoeConfig", "Qwen35MoeForCausalLM", "Qwen35MoeForCausalLMFactory",
]
