# ==================================================================================================================
# GENERATED FROM specs/olmoe.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/olmoe.yaml --target rocm
# source hash (spec + templates + generator): 605953591b9610a0
# ==================================================================================================================
"""Olmoe for the rocm target. See README.md."""
from .config import ARCHITECTURES, OlmoeConfig
from .model import OlmoeForCausalLM

CONFIG_CLASS = OlmoeConfig
MODEL_CLASS = OlmoeForCausalLM
SPEC = "specs/olmoe.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "OlmoeConfig", "OlmoeForCausalLM"]
