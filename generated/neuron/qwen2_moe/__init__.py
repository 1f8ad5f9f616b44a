# ==================================================================================================================
# GENERATED FROM specs/qwen2_moe.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen2_moe.yaml --target neuron
# source hash (spec + templates + generator): 8cc8b2c09e3837aa
# ==================================================================================================================
"""Qwen2Moe for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Qwen2MoeConfig
from .factory import Qwen2MoeForCausalLMFactory
from .model import Qwen2MoeForCausalLM

CONFIG_CLASS = Qwen2MoeConfig
MODEL_CLASS = Qwen2MoeForCausalLM
FACTORY_CLASS = Qwen2MoeForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/qwen2_moe.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Qwen2MoeConfig", "Qwen2MoeForCausalLM", "Qwen2MoeForCausalLMFactory",
]
