# ==================================================================================================================
# GENERATED FROM specs/gpt_oss.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/gpt_oss.yaml --target vllm
# source hash (spec + templates + generator): 560ee8db1905c88d
# ==================================================================================================================
"""GptOss for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, GptOssConfig

CONFIG_CLASS = GptOssConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.gpt_oss.model:GptOssForCausalLM"
SPEC = "specs/gpt_oss.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "GptOssConfig"]
