# ==================================================================================================================
# GENERATED FROM specs/olmo2.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/olmo2.yaml --target vllm
# source hash (spec + templates + generator): fcbba8870e6be22f
# ==================================================================================================================
"""Olmo2 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Olmo2Config

CONFIG_CLASS = Olmo2Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.olmo2.model:Olmo2ForCausalLM"
SPEC = "specs/olmo2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Olmo2Config"]
