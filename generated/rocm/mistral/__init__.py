# ==================================================================================================================
# GENERATED FROM specs/mistral.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/mistral.yaml --target rocm
# source hash (spec + templates + generator): 2c7b315196a71bd0
# ==================================================================================================================
"""Mistral for the rocm target. See README.md."""
from .config import ARCHITECTURES, MistralConfig
from .model import MistralForCausalLM

CONFIG_CLASS = MistralConfig
MODEL_CLASS = MistralForCausalLM
SPEC = "specs/mistral.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "MistralConfig", "MistralForCausalLM"]
