# ==================================================================================================================
# GENERATED FROM specs/glm4_moe.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/glm4_moe.yaml --target rocm
# source hash (spec + templates + generator): 8a95b4d8273e6bdf
# ==================================================================================================================
"""Glm4Moe for the rocm target. See README.md."""
from .config import ARCHITECTURES, Glm4MoeConfig
from .model import Glm4MoeForCausalLM

CONFIG_CLASS = Glm4MoeConfig
MODEL_CLASS = Glm4MoeForCausalLM
SPEC = "specs/glm4_moe.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Glm4MoeConfig", "Glm4MoeForCausalLM"]
