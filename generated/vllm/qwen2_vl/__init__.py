# ==================================================================================================================
# GENERATED FROM specs/qwen2_vl.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/qwen2_vl.yaml --target vllm
# source hash (spec + templates + generator): b9bb27481ce033f3
# ==================================================================================================================
"""Qwen2VL for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Qwen2VLConfig

CONFIG_CLASS = Qwen2VLConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.qwen2_vl.model:Qwen2VLForCausalLM"
SPEC = "specs/qwen2_vl.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Qwen2VLConfig"]
