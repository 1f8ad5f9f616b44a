# ==================================================================================================================
# GENERATED FROM specs/llama4.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/llama4.yaml --target vllm
# source hash (spec + templates + generator): 19628cc76f58aab4
# ==================================================================================================================
"""Llama4 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Llama4Config

CONFIG_CLASS = Llama4Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.llama4.model:Llama4ForCausalLM"
SPEC = "specs/llama4.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Llama4Config"]
