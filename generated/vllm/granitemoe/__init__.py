# ==================================================================================================================
# GENERATED FROM specs/granitemoe.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/granitemoe.yaml --target vllm
# source hash (spec + templates + generator): 293ae632995ee058
# ==================================================================================================================
"""GraniteMoe for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, GraniteMoeConfig

CONFIG_CLASS = GraniteMoeConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.granitemoe.model:GraniteMoeForCausalLM"
SPEC = "specs/granitemoe.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "GraniteMoeConfig"]
