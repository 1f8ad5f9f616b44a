# ==================================================================================================================
# GENERATED FROM specs/mamba2.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/mamba2.yaml --target vllm
# source hash (spec + templates + generator): 73ebf23d376a50aa
# ==================================================================================================================
"""Mamba2 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, Mamba2Config

CONFIG_CLASS = Mamba2Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.mamba2.model:Mamba2ForCausalLM"
SPEC = "specs/mamba2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "Mamba2Config"]
