# ==================================================================================================================
# GENERATED FROM specs/nemotron_h.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/nemotron_h.yaml --target rocm
# source hash (spec + templates + generator): fb5cb16d861c6a9b
# ==================================================================================================================
"""NemotronH for the rocm target. See README.md."""
from .config import ARCHITECTURES, NemotronHConfig
from .model import NemotronHForCausalLM

CONFIG_CLASS = NemotronHConfig
MODEL_CLASS = NemotronHForCausalLM
SPEC = "specs/nemotron_h.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "NemotronHConfig", "NemotronHForCausalLM"]
