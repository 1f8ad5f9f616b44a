# ==================================================================================================================
# GENERATED FROM specs/stablelm.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/stablelm.yaml --target rocm
# source hash (spec + templates + generator): 6fd7ab6125e9c1bf
# ==================================================================================================================
"""StableLm for the rocm target. See README.md."""
from .config import ARCHITECTURES, StableLmConfig
from .model import StableLmForCausalLM

CONFIG_CLASS = StableLmConfig
MODEL_CLASS = StableLmForCausalLM
SPEC = "specs/stablelm.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "StableLmConfig", "StableLmForCausalLM"]
