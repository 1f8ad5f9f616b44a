# ==================================================================================================================
# GENERATED FROM specs/minimax.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/minimax.yaml --target vllm
# source hash (spec + templates + generator): 8eb40ba1c52fdebf
# ==================================================================================================================
"""MiniMax for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, MiniMaxConfig

CONFIG_CLASS = MiniMaxConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.minimax.model:MiniMaxForCausalLM"
SPEC = "specs/minimax.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "MiniMaxConfig"]
