# ==================================================================================================================
# GENERATED FROM specs/lfm2.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/lfm2.yaml --target rocm
# source hash (spec + templates + generator): 08a06d2c1a1c3232
# ==================================================================================================================
"""Lfm2 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Lfm2Config
from .model import Lfm2ForCausalLM

CONFIG_CLASS = Lfm2Config
MODEL_CLASS = Lfm2ForCausalLM
SPEC = "specs/lfm2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Lfm2Config", "Lfm2ForCausalLM"]
