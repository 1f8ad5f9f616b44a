# ==================================================================================================================
# GENERATED FROM specs/gemma2.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/gemma2.yaml --target vllm
# source hash (spec + templates + generator): 10bb1901c2188355
# ==================================================================================================================
"""Gemma2 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Gemma2Config

CONFIG_CLASS = Gemma2Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.gemma2.model:Gemma2ForCausalLM"
SPEC = "specs/gemma2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Gemma2Config"]
