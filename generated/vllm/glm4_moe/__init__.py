# ==================================================================================================================
# GENERATED FROM specs/glm4_moe.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/glm4_moe.yaml --target vllm
# source hash (spec + templates + generator): 8a95b4d8273e6bdf
# ==================================================================================================================
"""Glm4Moe for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Glm4MoeConfig

CONFIG_CLASS = Glm4MoeConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.glm4_moe.model:Glm4MoeForCausalLM"
SPEC = "specs/glm4_moe.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Glm4MoeConfig"]
