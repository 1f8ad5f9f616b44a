# ==================================================================================================================
# GENERATED FROM specs/deepseek_v3.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/deepseek_v3.yaml --target vllm
# source hash (spec + templates + generator): 0c75639ee955f665
# ==================================================================================================================
"""DeepseekV3 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, DeepseekV3Config

CONFIG_CLASS = DeepseekV3Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.deepseek_v3.model:DeepseekV3ForCausalLM"
SPEC = "specs/deepseek_v3.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "DeepseekV3Config"]
