# ==================================================================================================================
# GENERATED FROM specs/qwen2.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/qwen2.yaml --target vllm
# source hash (spec + templates + generator): 1f6ec4bc1560a3c1
# ==================================================================================================================
"""Qwen2 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Qwen2Config

CONFIG_CLASS = Qwen2Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.qwen2.model:Qwen2ForCausalLM"
SPEC = "specs/qwen2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Qwen2Config"]
