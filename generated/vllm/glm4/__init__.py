# ==================================================================================================================
# GENERATED FROM specs/glm4.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/glm4.yaml --target vllm
# source hash (spec + templates + generator): 3c1747e9dd8dc5d2
# ==================================================================================================================
"""Glm4 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Glm4Config

CONFIG_CLASS = Glm4Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.glm4.model:Glm4ForCausalLM"
SPEC = "specs/glm4.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Glm4Config"]
