# ==================================================================================================================
# GENERATED FROM specs/deepseek_v32.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/deepseek_v32.yaml --target vllm
# source hash (spec + templates + generator): cc55a073c0906176
# ==================================================================================================================
"""DeepseekV32 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, DeepseekV32Config

CONFIG_CLASS = DeepseekV32Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.deepseek_v32.model:DeepseekV32ForCausalLM"
SPEC = "specs/deepseek_v32.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "DeepseekV32Config"]
