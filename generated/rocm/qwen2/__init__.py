# ==================================================================================================================
# GENERATED FROM specs/qwen2.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen2.yaml --target rocm
# source hash (spec + templates + generator): 1f6ec4bc1560a3c1
# ==================================================================================================================
"""Qwen2 for the rocm target. See README.md."""
from .config import ARCHITECTURES, Qwen2Config
from .model import Qwen2ForCausalLM

CONFIG_CLASS = Qwen2Config
MODEL_CLASS = Qwen2ForCausalLM
SPEC = "specs/qwen2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Qwen2Config", "Qwen2ForCausalLM"]
