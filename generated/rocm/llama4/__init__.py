# ==================================================================================================================
# GENERATED FROM specs/llama4.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/llama4.yaml --target rocm
# source hash (spec + templates + generator): 19628cc76f58aab4
# ==================================================================================================================
"""Llama4 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Llama4Config
from .model import Llama4ForCausalLM

CONFIG_CLASS = Llama4Config
MODEL_CLASS = Llama4ForCausalLM
SPEC = "specs/llama4.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Llama4Config", "Llama4ForCausalLM"]
