# ==================================================================================================================
# GENERATED FROM specs/deepseek_v2.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/deepseek_v2.yaml --target rocm
# source hash (spec + templates + generator): 5fd290e32d6c3b46
# ==================================================================================================================
"""DeepseekV2 for the rocm target. See README.md."""
from .config import ARCHITECTURES, DeepseekV2Config
from .model import DeepseekV2ForCausalLM

CONFIG_CLASS = DeepseekV2Config
MODEL_CLASS = DeepseekV2ForCausalLM
SPEC = "specs/deepseek_v2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "DeepseekV2Config", "DeepseekV2ForCausalLM"]
