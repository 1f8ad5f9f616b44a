# ==================================================================================================================
# GENERATED FROM specs/gemma3.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/gemma3.yaml --target rocm
# source hash (spec + templates + generator): 2e05c38a053c1cea
# ==================================================================================================================
"""Gemma3 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Gemma3Config
from .model import Gemma3ForCausalLM

CONFIG_CLASS = Gemma3Config
MODEL_CLASS = Gemma3ForCausalLM
SPEC = "specs/gemma3.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Gemma3Config", "Gemma3ForCausalLM"]
