# ==================================================================================================================
# GENERATED FROM specs/zamba2.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/zamba2.yaml --target rocm
# source hash (spec + templates + generator): 0affc9e7e816ac16
# ==================================================================================================================
"""Zamba2 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Zamba2Config
from .model import Zamba2ForCausalLM

CONFIG_CLASS = Zamba2Config
MODEL_CLASS = Zamba2ForCausalLM
SPEC = "specs/zamba2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Zamba2Config", "Zamba2ForCausalLM"]
