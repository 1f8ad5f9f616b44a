# ==================================================================================================================
# GENERATED FROM specs/starcoder2.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/starcoder2.yaml --target vllm
# source hash (spec + templates + generator): 28ed493bede862a2
# ==================================================================================================================
"""Starcoder2 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Starcoder2Config

CONFIG_CLASS = Starcoder2Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.starcoder2.model:Starcoder2ForCausalLM"
SPEC = "specs/starcoder2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Starcoder2Config"]
