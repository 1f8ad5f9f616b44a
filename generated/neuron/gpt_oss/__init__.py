# ==================================================================================================================
# GENERATED FROM specs/gpt_oss.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/gpt_oss.yaml --target neuron
# source hash (spec + templates + generator): 560ee8db1905c88d
# ==================================================================================================================
"""GptOss for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, GptOssConfig
from .factory import GptOssForCausalLMFactory
from .model import GptOssForCausalLM

CONFIG_CLASS = GptOssConfig
MODEL_CLASS = GptOssForCausalLM
FACTORY_CLASS = GptOssForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/gpt_oss.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "GptOssConfig", "GptOssForCausalLM", "GptOssForCausalLMFactory",
]
