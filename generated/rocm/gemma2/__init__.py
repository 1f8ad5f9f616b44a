# ==================================================================================================================
# GENERATED FROM specs/gemma2.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/gemma2.yaml --target rocm
# source hash (spec + templates + generator): 10bb1901c2188355
# ==================================================================================================================
"""Gemma2 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Gemma2Config
from .model import Gemma2ForCausalLM

CONFIG_CLASS = Gemma2Config
MODEL_CLASS = Gemma2ForCausalLM
SPEC = "specs/gemma2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Gemma2Config", "Gemma2ForCausalLM"]
