# ==================================================================================================================
# GENERATED FROM specs/qwen3_moe.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/qwen3_moe.yaml --target vllm
# source hash (spec + templates + generator): 48f38b72783e1105
# ==================================================================================================================
"""Qwen3Moe for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Qwen3MoeConfig

CONFIG_CLASS = Qwen3MoeConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.qwen3_moe.model:Qwen3MoeForCausalLM"
SPEC = "specs/qwen3_moe.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Qwen3MoeConfig"]
