# ==================================================================================================================
# GENERATED FROM specs/ernie4_5.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/ernie4_5.yaml --target rocm
# source hash (spec + templates + generator): 74d498222df81d22
# ==================================================================================================================
"""Ernie45 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Ernie45Config
from .model import Ernie45ForCausalLM

CONFIG_CLASS = Ernie45Config
MODEL_CLASS = Ernie45ForCausalLM
SPEC = "specs/ernie4_5.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Ernie45Config", "Ernie45ForCausalLM"]
