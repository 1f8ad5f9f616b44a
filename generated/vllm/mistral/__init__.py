# ==================================================================================================================
# GENERATED FROM specs/mistral.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/mistral.yaml --target vllm
# source hash (spec + templates + generator): 2c7b315196a71bd0
# ==================================================================================================================
"""Mistral for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, MistralConfig

CONFIG_CLASS = MistralConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.mistral.model:MistralForCausalLM"
SPEC = "specs/mistral.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "MistralConfig"]
