# ==================================================================================================================
# GENERATED FROM specs/cohere.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/cohere.yaml --target rocm
# source hash (spec + templates + generator): 58eb8c17b12cfad0
# ==================================================================================================================
"""Cohere for the rocm target. See README.md."""
from .config import ARCHITECTURES, CohereConfig
from .model import CohereForCausalLM

CONFIG_CLASS = CohereConfig
MODEL_CLASS = CohereForCausalLM
SPEC = "specs/cohere.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "CohereConfig", "CohereForCausalLM"]
