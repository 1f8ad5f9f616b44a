# ==================================================================================================================
# GENERATED FROM specs/nemotron_h.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/nemotron_h.yaml --target vllm
# source hash (spec + templates + generator): fb5cb16d861c6a9b
# ==================================================================================================================
"""NemotronH for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, NemotronHConfig

CONFIG_CLASS = NemotronHConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.nemotron_h.model:NemotronHForCausalLM"
SPEC = "specs/nemotron_h.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "NemotronHConfig"]
