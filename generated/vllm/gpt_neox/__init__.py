# ==================================================================================================================
# GENERATED FROM specs/gpt_neox.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/gpt_neox.yaml --target vllm
# source hash (spec + templates + generator): aeb2b996043dc05a
# ==================================================================================================================
"""GPTNeoX for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, GPTNeoXConfig

CONFIG_CLASS = GPTNeoXConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.gpt_neox.model:GPTNeoXForCausalLM"
SPEC = "specs/gpt_neox.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "GPTNeoXConfig"]
