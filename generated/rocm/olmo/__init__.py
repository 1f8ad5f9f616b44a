# ==================================================================================================================
# GENERATED FROM specs/olmo.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/olmo.yaml --target rocm
# source hash (spec + templates + generator): c404c7d483270492
# ==================================================================================================================
"""Olmo for the rocm target. See README.md."""
from .config import ARCHITECTURES, OlmoConfig
from .model import OlmoForCausalLM

CONFIG_CLASS = OlmoConfig
MODEL_CLASS = OlmoForCausalLM
SPEC = "specs/olmo.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "OlmoConfig", "OlmoForCausalLM"]
