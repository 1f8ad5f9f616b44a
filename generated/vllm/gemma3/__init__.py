# ==================================================================================================================
# GENERATED FROM specs/gemma3.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/gemma3.yaml --target vllm
# source hash (spec + templates + generator): 2e05c38a053c1cea
# ==================================================================================================================
"""Gemma3 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Gemma3Config

CONFIG_CLASS = Gemma3Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.gemma3.model:Gemma3ForCausalLM"
SPEC = "specs/gemma3.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Gemma3Config"]
