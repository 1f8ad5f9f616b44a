# ==================================================================================================================
# GENERATED FROM specs/qwen2_moe.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/qwen2_moe.yaml --target rocm
# source hash (spec + templates + generator): 8cc8b2c09e3837aa
# ==================================================================================================================
"""Qwen2Moe for the rocm target. See README.md."""
from .config import ARCHITECTURES, Qwen2MoeConfig
from .model import Qwen2MoeForCausalLM

CONFIG_CLASS = Qwen2MoeConfig
MODEL_CLASS = Qwen2MoeForCausalLM
SPEC = "specs/qwen2_moe.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "Qwen2MoeConfig", "Qwen2MoeForCausalLM"]
