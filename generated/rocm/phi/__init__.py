# ==================================================================================================================
# GENERATED FROM specs/phi.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/phi.yaml --target rocm
# source hash (spec + templates + generator): 8e35530cc9db435c
# ==================================================================================================================
"""Phi for the rocm target. See README.md."""
from .config import ARCHITECTURES, PhiConfig
from .model import PhiForCausalLM

CONFIG_CLASS = PhiConfig
MODEL_CLASS = PhiForCausalLM
SPEC = "specs/phi.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "PhiConfig", "PhiForCausalLM"]
