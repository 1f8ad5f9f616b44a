# ==================================================================================================================
# GENERATED FROM specs/falcon_h1.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/falcon_h1.yaml --target rocm
# source hash (spec + templates + generator): c6d883bdd38a51b9
# ==================================================================================================================
"""FalconH1 for the rocm target. See README.md."""
from .config import ARCHITECTURES, FalconH1Config
from .model import FalconH1ForCausalLM

CONFIG_CLASS = FalconH1Config
MODEL_CLASS = FalconH1ForCausalLM
SPEC = "specs/falcon_h1.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "FalconH1Config", "FalconH1ForCausalLM"]
