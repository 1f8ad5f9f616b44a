# ==================================================================================================================
# GENERATED FROM specs/qwen3_vl.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen3_vl.yaml --target rocm
# source hash (spec + templates + generator): 43f410fc65920204
# ==================================================================================================================
"""Qwen3VL for the rocm target. See README.md."""
from .config import ARCHITECTURES, Qwen3VLConfig
from .model import Qwen3VLForCausalLM

CONFIG_CLASS = Qwen3VLConfig
MODEL_CLASS = Qwen3VLForCausalLM
SPEC = "specs/qwen3_vl.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Qwen3VLConfig", "Qwen3VLForCausalLM"]
