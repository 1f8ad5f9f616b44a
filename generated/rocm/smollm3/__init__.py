# ==================================================================================================================
# GENERATED FROM specs/smollm3.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/smollm3.yaml --target rocm
# source hash (spec + templates + generator): f9eaf7361fde32bb
# ==================================================================================================================
"""SmolLM3 for the rocm target. See README.md."""
from .config import ARCHITECTURES, SmolLM3Config
from .model import SmolLM3ForCausalLM

CONFIG_CLASS = SmolLM3Config
MODEL_CLASS = SmolLM3ForCausalLM
SPEC = "specs/smollm3.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "SmolLM3Config", "SmolLM3ForCausalLM"]
