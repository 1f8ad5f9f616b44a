# ==================================================================================================================
# GENERATED FROM specs/phi3.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/phi3.yaml --target rocm
# source hash (spec + templates + generator): bf8b015ba8b29a82
# ==================================================================================================================
"""Phi3 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Phi3Config
from .model import Phi3ForCausalLM

CONFIG_CLASS = Phi3Config
MODEL_CLASS = Phi3ForCausalLM
SPEC = "specs/phi3.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Phi3Config", "Phi3ForCausalLM"]
