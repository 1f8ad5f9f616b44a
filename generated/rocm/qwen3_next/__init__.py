# ==================================================================================================================
# GENERATED FROM specs/qwen3_next.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen3_next.yaml --target rocm
# source hash (spec + templates + generator): bb29085f76c04d70
# ==================================================================================================================
"""Qwen3Next for the rocm target. See README.md."""
from .config import ARCHITECTURES, Qwen3NextConfig
from .model import Qwen3NextForCausalLM

CONFIG_CLASS = Qwen3NextConfig
MODEL_CLASS = Qwen3NextForCausalLM
SPEC = "specs/qwen3_next.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Qwen3NextConfig", "Qwen3NextForCausalLM"]
