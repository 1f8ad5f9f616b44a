# ==================================================================================================================
# GENERATED FROM specs/falcon.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/falcon.yaml --target vllm
# source hash (spec + templates + generator): ce49f39398f9c72e
# ==================================================================================================================
"""Falcon for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, FalconConfig

CONFIG_CLASS = FalconConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.falcon.model:FalconForCausalLM"
SPEC = "specs/falcon.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "FalconConfig"]
