# ==================================================================================================================
# GENERATED FROM specs/cohere.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/cohere.yaml --target vllm
# source hash (spec + templates + generator): 58eb8c17b12cfad0
# ==================================================================================================================
"""Cohere for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, CohereConfig

CONFIG_CLASS = CohereConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.cohere.model:CohereForCausalLM"
SPEC = "specs/cohere.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "CohereConfig"]
