# ==================================================================================================================
# GENERATED FROM specs/llama.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/llama.yaml --target vllm
# source hash (spec + templates + generator): 4a496daff8ff2f72
# ==================================================================================================================
"""Llama for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, LlamaConfig

CONFIG_CLASS = LlamaConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.llama.model:LlamaForCausalLM"
SPEC = "specs/llama.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "LlamaConfig"]
