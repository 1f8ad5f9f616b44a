# ==================================================================================================================
# GENERATED FROM specs/falcon.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/falcon.yaml --target rocm
# source hash (spec + templates + generator): ce49f39398f9c72e
# ==================================================================================================================
"""Falcon for the rocm target. See README.md."""
from .config import ARCHITECTURES, FalconConfig
from .model import FalconForCausalLM

CONFIG_CLASS = FalconConfig
MODEL_CLASS = FalconForCausalLM
SPEC = "specs/falcon.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "FalconConfig", "FalconForCausalLM"]
