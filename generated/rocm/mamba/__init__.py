# ==================================================================================================================
# GENERATED FROM specs/mamba.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/mamba.yaml --target rocm
# source hash (spec + templates + generator): 459784f62379ca15
# ==================================================================================================================
"""Mamba for the rocm target. See README.md."""
from .config import ARCHITECTURES, MambaConfig
from .model import MambaForCausalLM

CONFIG_CLASS = MambaConfig
MODEL_CLASS = MambaForCausalLM
SPEC = "specs/mamba.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "MambaConfig", "MambaForCausalLM"]
