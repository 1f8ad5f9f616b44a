# ==================================================================================================================
# GENERATED FROM specs/qwen3.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen3.yaml --target rocm
# source hash (spec + templates + generator): 4b09b0c64418f44b
# ==================================================================================================================
"""Qwen3 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Qwen3Config
from .model import Qwen3ForCausalLM

CONFIG_CLASS = Qwen3Config
MODEL_CLASS = Qwen3ForCausalLM
SPEC = "specs/qwen3.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Qwen3Config", "Qwen3ForCausalLM"]
