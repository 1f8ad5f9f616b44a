# ==================================================================================================================
# GENERATED FROM specs/qwen2_vl.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen2_vl.yaml --target rocm
# source hash (spec + templates + generator): b9bb27481ce033f3
# ==================================================================================================================
"""Qwen2VL for the rocm target. See README.md."""
from .config import ARCHITECTURES, Qwen2VLConfig
from .model import Qwen2VLForCausalLM

CONFIG_CLASS = Qwen2VLConfig
MODEL_CLASS = Qwen2VLForCausalLM
SPEC = "specs/qwen2_vl.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Qwen2VLConfig", "Qwen2VLForCausalLM"]
