# ==================================================================================================================
# GENERATED FROM specs/hunyuan_v1_dense.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/hunyuan_v1_dense.yaml --target rocm
# source hash (spec + templates + generator): 23781df668baa6fb
# ==================================================================================================================
"""HunYuanDense for the rocm target. See README.md."""
from .config import ARCHITECTURES, HunYuanDenseConfig
from .model import HunYuanDenseForCausalLM

CONFIG_CLASS = HunYuanDenseConfig
MODEL_CLASS = HunYuanDenseForCausalLM
SPEC = "specs/hunyuan_v1_dense.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "HunYuanDenseConfig", "HunYuanDenseForCausalLM"]
