# ==================================================================================================================
# GENERATED FROM specs/minimax.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/minimax.yaml --target rocm
# source hash (spec + templates + generator): 8eb40ba1c52fdebf
# ==================================================================================================================
"""MiniMax for the rocm target. See README.md."""
from .config import ARCHITECTURES, MiniMaxConfig
from .model import MiniMaxForCausalLM

CONFIG_CLASS = MiniMaxConfig
MODEL_CLASS = MiniMaxForCausalLM
SPEC = "specs/minimax.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "MiniMaxConfig", "MiniMaxForCausalLM"]
