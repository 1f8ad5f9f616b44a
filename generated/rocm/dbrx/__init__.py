# ==================================================================================================================
# GENERATED FROM specs/dbrx.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/dbrx.yaml --target rocm
# source hash (spec + templates + generator): 51000dfa6911d58b
# ==================================================================================================================
"""Dbrx for the rocm target. See README.md."""
from .config import ARCHITECTURES, DbrxConfig
from .model import DbrxForCausalLM

CONFIG_CLASS = DbrxConfig
MODEL_CLASS = DbrxForCausalLM
SPEC = "specs/dbrx.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "DbrxConfig", "DbrxForCausalLM"]
