# ==================================================================================================================
# GENERATED FROM specs/qwen2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/qwen2.yaml --target neuron
# source hash (spec + templates + generator): 1f6ec4bc1560a3c1
# ==================================================================================================================
"""Qwen2 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, Qwen2Config
from .factory import Qwen2ForCausalLMFactory
from .model import Qwen2ForCausalLM

CONFIG_CLASS = Qwen2Config
MODEL_CLASS = Qwen2ForCausalLM
FACTORY_CLASS = Qwen2ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/qwen2.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "Qwen2Config", "Qwen2ForCausalLM", "Qwen2ForCausalLMFactory",
]
