# ==================================================================================================================
# GENERATED FROM specs/stablelm.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/stablelm.yaml --target neuron
# source hash (spec + templates + generator): 6fd7ab6125e9c1bf
# ==================================================================================================================
"""StableLm for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, StableLmConfig
from .factory import StableLmForCausalLMFactory
from .model import StableLmForCausalLM

CONFIG_CLASS = StableLmConfig
MODEL_CLASS = StableLmForCausalLM
FACTORY_CLASS = StableLmForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/stablelm.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "StableLmConfig", "StableLmForCausalLM", "StableLmForCausalLMFactory",
]
