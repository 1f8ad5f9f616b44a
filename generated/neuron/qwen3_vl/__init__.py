# ==================================================================================================================
# GENERATED FROM specs/qwen3_vl.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen3_vl.yaml --target neuron
# source hash (spec + templates + generator): 43f410fc65920204
# ==================================================================================================================
"""Qwen3VL for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Qwen3VLConfig
from .factory import Qwen3VLForCausalLMFactory
from .model import Qwen3VLForCausalLM

CONFIG_CLASS = Qwen3VLConfig
MODEL_CLASS = Qwen3VLForCausalLM
FACTORY_CLASS = Qwen3VLForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/qwen3_vl.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Qwen3VLConfig", "Qwen3VLForCausalLM", "Qwen3VLForCausalLMFactory",
]
