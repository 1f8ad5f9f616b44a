# ==================================================================================================================
# GENERATED FROM specs/exaone4.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/exaone4.yaml --target vllm
# source hash (spec + templates + generator): ab937a67084b1e37
# ==================================================================================================================
"""Exaone4 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Exaone4Config

CONFIG_CLASS = Exaone4Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.exaone4.model:Exaone4ForCausalLM"
SPEC = "specs/exaone4.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Exaone4Config"]
