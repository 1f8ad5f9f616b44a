# ==================================================================================================================
# GENERATED FROM specs/starcoder2.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/starcoder2.yaml --target rocm
# source hash (spec + templates + generator): 28ed493bede862a2
# ==================================================================================================================
"""Starcoder2 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Starcoder2Config
from .model import Starcoder2ForCausalLM

CONFIG_CLASS = Starcoder2Config
MODEL_CLASS = Starcoder2ForCausalLM
SPEC = "specs/starcoder2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Starcoder2Config", "Starcoder2ForCausalLM"]
