# ==================================================================================================================
# GENERATED FROM specs/glm4.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/glm4.yaml --target rocm
# source hash (spec + templates + generator): 3c1747e9dd8dc5d2
# ==================================================================================================================
"""Glm4 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Glm4Config
from .model import Glm4ForCausalLM

CONFIG_CLASS = Glm4Config
MODEL_CLASS = Glm4ForCausalLM
SPEC = "specs/glm4.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Glm4Config", "Glm4ForCausalLM"]
