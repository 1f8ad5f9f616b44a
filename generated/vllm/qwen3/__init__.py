# ==================================================================================================================
# GENERATED FROM specs/qwen3.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/qwen3.yaml --target vllm
# source hash (spec + templates + generator): 4b09b0c64418f44b
# ==================================================================================================================
"""Qwen3 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Qwen3Config

CONFIG_CLASS = Qwen3Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.qwen3.model:Qwen3ForCausalLM"
SPEC = "specs/qwen3.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Qwen3Config"]
