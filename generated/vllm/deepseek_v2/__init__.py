# ==================================================================================================================
# GENERATED FROM specs/deepseek_v2.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/deepseek_v2.yaml --target vllm
# source hash (spec + templates + generator): 5fd290e32d6c3b46
# ==================================================================================================================
"""DeepseekV2 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, DeepseekV2Config

CONFIG_CLASS = DeepseekV2Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.deepseek_v2.model:DeepseekV2ForCausalLM"
SPEC = "specs/deepseek_v2.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "DeepseekV2Config"]
