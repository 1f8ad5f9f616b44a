# ==================================================================================================================
# GENERATED FROM specs/gpt_oss.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/gpt_oss.yaml --target neuron
# source hash (spec + templates + generator): b32d1d912e0c66a4
# ==================================================================================================================
"""GptOss for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, GptOssConfig
from .factory import GptOssForCausalLMFactory
from .model import GptOssForCausalLM

CONFIG_CLASS = GptOssConfig
MODEL_CLASS = GptOssForCausalLM
SPEC = "specs/gpt_oss.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "GptOssConfig", "GptOssForCausalLM",
    "GptOssForCausalLMFactory",
]
