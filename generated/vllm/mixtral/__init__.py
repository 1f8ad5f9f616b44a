# ==================================================================================================================
# GENERATED FROM specs/mixtral.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/mixtral.yaml --target vllm
# source hash (spec + templates + generator): 1920e6ad85681262
# ==================================================================================================================
"""Mixtral for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, MixtralConfig

CONFIG_CLASS = MixtralConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.mixtral.model:MixtralForCausalLM"
SPEC = "specs/mixtral.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "MixtralConfig"]
