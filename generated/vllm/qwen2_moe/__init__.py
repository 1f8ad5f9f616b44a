# ==================================================================================================================
# GENERATED FROM specs/qwen2_moe.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/qwen2_moe.yaml --target vllm
# source hash (spec + templates + generator): 8cc8b2c09e3837aa
# ==================================================================================================================
"""Qwen2Moe for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Qwen2MoeConfig

CONFIG_CLASS = Qwen2MoeConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.qwen2_moe.model:Qwen2MoeForCausalLM"
SPEC = "specs/qwen2_moe.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Qwen2MoeConfig"]
