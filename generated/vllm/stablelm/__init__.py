# ==================================================================================================================
# GENERATED FROM specs/stablelm.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/stablelm.yaml --target vllm
# source hash (spec + templates + generator): 6fd7ab6125e9c1bf
# ==================================================================================================================
"""StableLm for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, StableLmConfig

CONFIG_CLASS = StableLmConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.stablelm.model:StableLmForCausalLM"
SPEC = "specs/stablelm.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "StableLmConfig"]
