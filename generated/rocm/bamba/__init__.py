# ==================================================================================================================
# GENERATED FROM specs/bamba.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/bamba.yaml --target rocm
# source hash (spec + templates + generator): 4a2ad3a1ea9ac77a
# ==================================================================================================================
"""Bamba for the rocm target. See README.md."""
from .config import ARCHITECTURES, BambaConfig
from .model import BambaForCausalLM

CONFIG_CLASS = BambaConfig
MODEL_CLASS = BambaForCausalLM
SPEC = "specs/bamba.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "BambaConfig", "BambaForCausalLM"]
