# ==================================================================================================================
# GENERATED FROM specs/phi.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/phi.yaml --target vllm
# source hash (spec + templates + generator): 8e35530cc9db435c
# ==================================================================================================================
"""Phi for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, PhiConfig

CONFIG_CLASS = PhiConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.phi.model:PhiForCausalLM"
SPEC = "specs/phi.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "PhiConfig"]
