# ==================================================================================================================
# GENERATED FROM specs/glm_moe_dsa.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/glm_moe_dsa.yaml --target rocm
# source hash (spec + templates + generator): c7d36e698e90fbf2
# ==================================================================================================================
"""GlmMoeDsa for the rocm target. See README.md."""
from .config import ARCHITECTURES, GlmMoeDsaConfig
from .model import GlmMoeDsaForCausalLM

CONFIG_CLASS = GlmMoeDsaConfig
MODEL_CLASS = GlmMoeDsaForCausalLM
SPEC = "specs/glm_moe_dsa.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "GlmMoeDsaConfig", "GlmMoeDsaForCausalLM"]
