# ==================================================================================================================
# GENERATED FROM specs/qwen3_next.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/qwen3_next.yaml --target vllm
# source hash (spec + templates + generator): bb29085f76c04d70
# ==================================================================================================================
"""Qwen3Next for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Qwen3NextConfig

CONFIG_CLASS = Qwen3NextConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.qwen3_next.model:Qwen3NextForCausalLM"
SPEC = "specs/qwen3_next.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Qwen3NextConfig"]
