# ==================================================================================================================
# GENERATED FROM specs/deepseek_v3.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/deepseek_v3.yaml --target rocm
# source hash (spec + templates + generator): 0c75639ee955f665
# ==================================================================================================================
"""DeepseekV3 for the rocm target. See README.md."""
from .config import ARCHITECTURES, DeepseekV3Config
from .model import DeepseekV3ForCausalLM

CONFIG_CLASS = DeepseekV3Config
MODEL_CLASS = DeepseekV3ForCausalLM
SPEC = "specs/deepseek_v3.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "DeepseekV3Config", "DeepseekV3ForCausalLM"]
