# ==================================================================================================================
# GENERATED FROM specs/olmoe.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/olmoe.yaml --target vllm
# source hash (spec + templates + generator): 605953591b9610a0
# ==================================================================================================================
"""Olmoe for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, OlmoeConfig

CONFIG_CLASS = OlmoeConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.olmoe.model:OlmoeForCausalLM"
SPEC = "specs/olmoe.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "OlmoeConfig"]
