# ==================================================================================================================
# GENERATED FROM specs/glm_moe_dsa.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/glm_moe_dsa.yaml --target neuron
# source hash (spec + templates + generator): c7d36e698e90fbf2
# ==================================================================================================================
"""GlmMoeDsa for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, GlmMoeDsaConfig
from .factory import GlmMoeDsaForCausalLMFactory
from .model import GlmMoeDsaForCausalLM

CONFIG_CLASS = GlmMoeDsaConfig
MODEL_CLASS = GlmMoeDsaForCausalLM
FACTORY_CLASS = GlmMoeDsaForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/glm_moe_dsa.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "GlmMoeDsaConfig", "GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLMFactory",
]
