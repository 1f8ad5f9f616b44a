# ==================================================================================================================
# GENERATED FROM specs/olmo2.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/olmo2.yaml --target rocm
# source hash (spec + templates + generator): fcbba8870e6be22f
# ==================================================================================================================
"""Olmo2 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Olmo2Config
from .model import Olmo2ForCausalLM

CONFIG_CLASS = Olmo2Config
MODEL_CLASS = Olmo2ForCausalLM
SPEC = "specs/olmo2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Olmo2Config", "Olmo2ForCausalLM"]
