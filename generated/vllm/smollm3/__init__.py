# ==================================================================================================================
# GENERATED FROM specs/smollm3.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/smollm3.yaml --target vllm
# source hash (spec + templates + generator): f9eaf7361fde32bb
# ==================================================================================================================
"""SmolLM3 for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, SmolLM3Config

CONFIG_CLASS = SmolLM3Config
MODEL_CLASS_PATH = "modelgen.generated.vllm.smollm3.model:SmolLM3ForCausalLM"
SPEC = "specs/smollm3.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "SmolLM3Config"]
