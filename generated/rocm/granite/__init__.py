# ==================================================================================================================
# GENERATED FROM specs/granite.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/granite.yaml --target rocm
# source hash (spec + templates + generator): bb1edf329abaa59f
# ==================================================================================================================
"""Granite for the rocm target. See README.md."""
from .config import ARCHITECTURES, GraniteConfig
from .model import GraniteForCausalLM

CONFIG_CLASS = GraniteConfig
MODEL_CLASS = GraniteForCausalLM
SPEC = "specs/granite.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "GraniteConfig", "GraniteForCausalLM"]
