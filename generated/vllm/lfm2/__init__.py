# ==================================================================================================================
# GENERATED FROM specs/lfm2.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/lfm2.yaml --target vllm
# source hash (spec + templates + generator): 08a06d2c1a1c3232
# ==================================================================================================================
"""Lfm2 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Lfm2Config

CONFIG_CLASS = Lfm2Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.lfm2.model:Lfm2ForCausalLM"
SPEC = "specs/lfm2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Lfm2Config"]
