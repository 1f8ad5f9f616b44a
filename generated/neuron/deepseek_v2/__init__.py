# ==================================================================================================================
# GENERATED FROM specs/deepseek_v2.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/deepseek_v2.yaml --target neuron
# source hash (spec + templates + generator): 5fd290e32d6c3b46
# ==================================================================================================================
"""DeepseekV2 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, DeepseekV2Config
from .factory import DeepseekV2ForCausalLMFactory
from .model import DeepseekV2ForCausalLM

CONFIG_CLASS = DeepseekV2Config
MODEL_CLASS = DeepseekV2ForCausalLM
FACTORY_CLASS = DeepseekV2ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/deepseek_v2.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "DeepseekV2Config", "DeepseekV2ForCausalLM", "DeepseekV2ForCausalLMFactory",
]
