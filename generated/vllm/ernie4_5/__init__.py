# ==================================================================================================================
# GENERATED FROM specs/ernie4_5.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/ernie4_5.yaml --target vllm
# source hash (spec + templates + generator): 74d498222df81d22
# ==================================================================================================================
"""Ernie45 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Ernie45Config

CONFIG_CLASS = Ernie45Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.ernie4_5.model:Ernie45ForCausalLM"
SPEC = "specs/ernie4_5.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Ernie45Config"]
