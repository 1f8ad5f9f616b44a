# ==================================================================================================================
# GENERATED FROM specs/deepseek_v32.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/deepseek_v32.yaml --target rocm
# source hash (spec + templates + generator): cc55a073c0906176
# ==================================================================================================================
"""DeepseekV32 for the rocm target. See README.md."""
from .config import ARCHITECTURES, DeepseekV32Config
from .model import DeepseekV32ForCausalLM

CONFIG_CLASS = DeepseekV32Config
MODEL_CLASS = DeepseekV32ForCausalLM
SPEC = "specs/deepseek_v32.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "DeepseekV32Config", "DeepseekV32ForCausalLM"]
