# ==================================================================================================================
# GENERATED FROM specs/deepseek_v3.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/deepseek_v3.yaml --target neuron
# source hash (spec + templates + generator): 0c75639ee955f665
# ==================================================================================================================
"""DeepseekV3 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, DeepseekV3Config
from .factory import DeepseekV3ForCausalLMFactory
from .model import DeepseekV3ForCausalLM

CONFIG_CLASS = DeepseekV3Config
MODEL_CLASS = DeepseekV3ForCausalLM
FACTORY_CLASS = DeepseekV3ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/deepseek_v3.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "DeepseekV3Config", "DeepseekV3ForCausalLM", "DeepseekV3ForCausalLMFactory",
]
