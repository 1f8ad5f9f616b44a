# ==================================================================================================================
# GENERATED FROM specs/granite.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/granite.yaml --target vllm
# source hash (spec + templates + generator): bb1edf329abaa59f
# ==================================================================================================================
"""Granite for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, GraniteConfig

CONFIG_CLASS = GraniteConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.granite.model:GraniteForCausalLM"
SPEC = "specs/granite.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "GraniteConfig"]
