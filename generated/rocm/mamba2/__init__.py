# ==================================================================================================================
# GENERATED FROM specs/mamba2.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/mamba2.yaml --target rocm
# source hash (spec + templates + generator): 73ebf23d376a50aa
# ==================================================================================================================
"""Mamba2 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Mamba2Config
from .model import Mamba2ForCausalLM

CONFIG_CLASS = Mamba2Config
MODEL_CLASS = Mamba2ForCausalLM
SPEC = "specs/mamba2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Mamba2Config", "Mamba2ForCausalLM"]
