# ==================================================================================================================
# GENERATED FROM specs/gpt_oss.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/gpt_oss.yaml --target rocm
# source hash (spec + templates + generator): 560ee8db1905c88d
# ==================================================================================================================
"""GptOss for the rocm target. See README.md."""
from .config import ARCHITECTURES, GptOssConfig
from .model import GptOssForCausalLM

CONFIG_CLASS = GptOssConfig
MODEL_CLASS = GptOssForCausalLM
SPEC = "specs/gpt_oss.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "GptOssConfig", "GptOssForCausalLM"]
