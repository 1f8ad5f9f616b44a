# ==================================================================================================================
# GENERATED FROM specs/granitemoe.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/granitemoe.yaml --target rocm
# source hash (spec + templates + generator): 293ae632995ee058
# ==================================================================================================================
"""GraniteMoe for the rocm target. See README.md."""
from .config import ARCHITECTURES, GraniteMoeConfig
from .model import GraniteMoeForCausalLM

CONFIG_CLASS = GraniteMoeConfig
MODEL_CLASS = GraniteMoeForCausalLM
SPEC = "specs/granitemoe.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "GraniteMoeConfig", "GraniteMoeForCausalLM"]
