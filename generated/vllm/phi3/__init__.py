# ==================================================================================================================
# GENERATED FROM specs/phi3.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/phi3.yaml --target vllm
# source hash (spec + templates + generator): bf8b015ba8b29a82
# ==================================================================================================================
"""Phi3 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Phi3Config

CONFIG_CLASS = Phi3Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.phi3.model:Phi3ForCausalLM"
SPEC = "specs/phi3.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Phi3Config"]
