# ==================================================================================================================
# GENERATED FROM specs/hunyuan_v1_dense.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/hunyuan_v1_dense.yaml --target neuron
# source hash (spec + templates + generator): 23781df668baa6fb
# ==================================================================================================================
"""HunYuanDense for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, HunYuanDenseConfig
from .factory import HunYuanDenseForCausalLMFactory
from .model import HunYuanDenseForCausalLM

CONFIG_CLASS = HunYuanDenseConfig
MODEL_CLASS = HunYuanDenseForCausalLM
FACTORY_CLASS = HunYuanDenseForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/hunyuan_v1_dense.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "HunYuanDenseConfig", "HunYuanDenseForCausalLM", "HunYuanDenseForCausalLMFactory",
]
