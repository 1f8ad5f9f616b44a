# ==================================================================================================================
# GENERATED FROM specs/deepseek_v32.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/deepseek_v32.yaml --target neuron
# source hash (spec + templates + generator): cc55a073c0906176
# ==================================================================================================================
"""DeepseekV32 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, DeepseekV32Config
from .factory import DeepseekV32ForCausalLMFactory
from .model import DeepseekV32ForCausalLM

CONFIG_CLASS = DeepseekV32Config
MODEL_CLASS = DeepseekV32ForCausalLM
FACTORY_CLASS = DeepseekV32ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/deepseek_v32.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "DeepseekV32Config", "DeepseekV32ForCausalLM", "DeepseekV32ForCausalLMFactory",
]
