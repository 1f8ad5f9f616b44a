# ==================================================================================================================
# GENERATED FROM specs/qwen3_5_moe.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/qwen3_5_moe.yaml --target vllm
# source hash (spec + templates + generator): 105439931bad3ad5
# ==================================================================================================================
"""Qwen35Moe for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Qwen35MoeConfig

CONFIG_CLASS = Qwen35MoeConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.qwen3_5_moe.model:Qwen35MoeForCausalLM"
SPEC = "specs/qwen3_5_moe.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Qwen35MoeConfig"]
