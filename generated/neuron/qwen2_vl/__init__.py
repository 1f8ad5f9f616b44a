# ==================================================================================================================
# GENERATED FROM specs/qwen2_vl.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen2_vl.yaml --target neuron
# source hash (spec + templates + generator): b9bb27481ce033f3
# ==================================================================================================================
"""Qwen2VL for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Qwen2VLConfig
from .factory import Qwen2VLForCausalLMFactory
from .model import Qwen2VLForCausalLM

CONFIG_CLASS = Qwen2VLConfig
MODEL_CLASS = Qwen2VLForCausalLM
FACTORY_CLASS = Qwen2VLForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/qwen2_vl.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Qwen2VLConfig", "Qwen2VLForCausalLM", "Qwen2VLForCausalLMFactory",
]
