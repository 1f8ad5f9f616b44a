# ==================================================================================================================
# GENERATED FROM specs/mamba.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/mamba.yaml --target vllm
# source hash (spec + templates + generator): 459784f62379ca15
# ==================================================================================================================
"""Mamba for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, MambaConfig

CONFIG_CLASS = MambaConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.mamba.model:MambaForCausalLM"
SPEC = "specs/mamba.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "MambaConfig"]
