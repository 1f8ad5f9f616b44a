# ==================================================================================================================
# GENERATED FROM specs/jamba.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/jamba.yaml --target vllm
# source hash (spec + templates + generator): 5cda34398e1bf9d2
# ==================================================================================================================
"""Jamba for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, JambaConfig

CONFIG_CLASS = JambaConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.jamba.model:JambaForCausalLM"
SPEC = "specs/jamba.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "JambaConfig"]
