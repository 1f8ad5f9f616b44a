# ==================================================================================================================
# GENERATED FROM specs/llama.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/llama.yaml --target rocm
# source hash (spec + templates + generator): 4a496daff8ff2f72
# ==================================================================================================================
"""Llama for the rocm target. See README.md."""
from .config import ARCHITECTURES, LlamaConfig
from .model import LlamaForCausalLM

CONFIG_CLASS = LlamaConfig
MODEL_CLASS = LlamaForCausalLM
SPEC = "specs/llama.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "LlamaConfig", "LlamaForCausalLM"]
