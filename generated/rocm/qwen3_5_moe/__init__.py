# ==================================================================================================================
# GENERATED FROM specs/qwen3_5_moe.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen3_5_moe.yaml --target rocm
# source hash (spec + templates + generator): 105439931bad3ad5
# ==================================================================================================================
"""Qwen35Moe for the rocm target. See README.md."""
from .config import ARCHITECTURES, Qwen35MoeConfig
from .model import Qwen35MoeForCausalLM

CONFIG_CLASS = Qwen35MoeConfig
MODEL_CLASS = Qwen35MoeForCausalLM
SPEC = "specs/qwen3_5_moe.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Qwen35MoeConfig", "Qwen35MoeForCausalLM"]
