# ==================================================================================================================
# GENERATED FROM specs/hunyuan_v1_dense.yaml BY modelgen 0.1.0 (target: vllm) -- DO NOT EDIT.
# Edit the spec or templates/vllm/ and run: modelgen build specs/hunyuan_v1_dense.yaml --target vllm
# source hash (spec + templates + generator): 23781df668baa6fb
# ==================================================================================================================
"""HunYuanDense for the vllm target. See README.md.

Importing this package does not import vLLM: modelgen's plugin registers ``MODEL_CLASS_PATH`` with vLLM's model
registry as a lazy ``"module:Class"`` string, and vLLM imports ``.model`` only when it builds the model.
"""
from .config import ARCHITECTURES, HunYuanDenseConfig

CONFIG_CLASS = HunYuanDenseConfig
MODEL_CLASS_PATH = "modelgen.generated.vllm.hunyuan_v1_dense.model:HunYuanDenseForCausalLM"
SPEC = "specs/hunyuan_v1_dense.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS_PATH", "SPEC", "HunYuanDenseConfig"]
