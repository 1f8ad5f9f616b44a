# ==================================================================================================================
# GENERATED FROM specs/bamba.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/bamba.yaml --target vllm
# source hash (spec + templates + generator): 4a2ad3a1ea9ac77a
# ==================================================================================================================
"""Bamba for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, BambaConfig

CONFIG_CLASS = BambaConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.bamba.model:BambaForCausalLM"
SPEC = "specs/bamba.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "BambaConfig"]
