# ==================================================================================================================
# GENERATED FROM specs/exaone4.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/exaone4.yaml --target rocm
# source hash (spec + templates + generator): ab937a67084b1e37
# ==================================================================================================================
"""Exaone4 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Exaone4Config
from .model import Exaone4ForCausalLM

CONFIG_CLASS = Exaone4Config
MODEL_CLASS = Exaone4ForCausalLM
SPEC = "specs/exaone4.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Exaone4Config", "Exaone4ForCausalLM"]
