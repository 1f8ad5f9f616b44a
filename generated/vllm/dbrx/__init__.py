# ==================================================================================================================
# GENERATED FROM specs/dbrx.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/dbrx.yaml --target vllm
# source hash (spec + templates + generator): 51000dfa6911d58b
# ==================================================================================================================
"""Dbrx for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, DbrxConfig

CONFIG_CLASS = DbrxConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.dbrx.model:DbrxForCausalLM"
SPEC = "specs/dbrx.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "DbrxConfig"]
