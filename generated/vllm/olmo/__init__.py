# ==================================================================================================================
# GENERATED FROM specs/olmo.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/olmo.yaml --target vllm
# source hash (spec + templates + generator): c404c7d483270492
# ==================================================================================================================
"""Olmo for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, OlmoConfig

CONFIG_CLASS = OlmoConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.olmo.model:OlmoForCausalLM"
SPEC = "specs/olmo.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "OlmoConfig"]
