# ==================================================================================================================
# GENERATED FROM specs/glm_moe_dsa.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/glm_moe_dsa.yaml --target vllm
# source hash (spec + templates + generator): c7d36e698e90fbf2
# ==================================================================================================================
"""GlmMoeDsa for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, GlmMoeDsaConfig

CONFIG_CLASS = GlmMoeDsaConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.glm_moe_dsa.model:GlmMoeDsaForCausalLM"
SPEC = "specs/glm_moe_dsa.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "GlmMoeDsaConfig"]
