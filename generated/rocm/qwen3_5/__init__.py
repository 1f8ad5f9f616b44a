# ==================================================================================================================
# GENERATED FROM specs/qwen3_5.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen3_5.yaml --target rocm
# source hash (spec + templates + generator): 276b47a7d839ff20
# ==================================================================================================================
"""Qwen35 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Qwen35Config
from .model import Qwen35ForCausalLM

CONFIG_CLASS = Qwen35Config
MODEL_CLASS = Qwen35ForCausalLM
SPEC = "specs/qwen3_5.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Qwen35Config", "Qwen35ForCausalLM"]
