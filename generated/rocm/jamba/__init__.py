# ==================================================================================================================
# GENERATED FROM specs/jamba.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/jamba.yaml --target rocm
# source hash (spec + templates + generator): 5cda34398e1bf9d2
# ==================================================================================================================
"""Jamba for the rocm target. See README.md."""
from .config import ARCHITECTURES, JambaConfig
from .model import JambaForCausalLM

CONFIG_CLASS = JambaConfig
MODEL_CLASS = JambaForCausalLM
SPEC = "specs/jamba.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "JambaConfig", "JambaForCausalLM"]
