# ==================================================================================================================
# GENERATED FROM specs/mixtral.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/mixtral.yaml --target rocm
# source hash (spec + templates + generator): 1920e6ad85681262
# ==================================================================================================================
"""Mixtral for the rocm target. See README.md."""
from .config import ARCHITECTURES, MixtralConfig
from .model import MixtralForCausalLM

CONFIG_CLASS = MixtralConfig
MODEL_CLASS = MixtralForCausalLM
SPEC = "specs/mixtral.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "MixtralConfig", "MixtralForCausalLM"]
