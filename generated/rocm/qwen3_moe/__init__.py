# ==================================================================================================================
# GENERATED FROM specs/qwen3_moe.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen3_moe.yaml --target rocm
# source hash (spec + templates + generator): 48f38b72783e1105
# ==================================================================================================================
"""Qwen3Moe for the rocm target. See README.md."""
from .config import ARCHITECTURES, Qwen3MoeConfig
from .model import Qwen3MoeForCausalLM

CONFIG_CLASS = Qwen3MoeConfig
MODEL_CLASS = Qwen3MoeForCausalLM
SPEC = "specs/qwen3_moe.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Qwen3MoeConfig", "Qwen3MoeForCausalLM"]
