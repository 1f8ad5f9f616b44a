# ==================================================================================================================
# GENERATED FROM specs/granitemoe.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/granitemoe.yaml --target neuron
# source hash (spec + templates + generator): 293ae632995ee058
# ==================================================================================================================
"""GraniteMoe for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, GraniteMoeConfig
from .factory import GraniteMoeForCausalLMFactory
from .model import GraniteMoeForCausalLM

CONFIG_CLASS = GraniteMoeConfig
MODEL_CLASS = GraniteMoeForCausalLM
FACTORY_CLASS = GraniteMoeForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/granitemoe.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "GraniteMoeConfig", "GraniteMoeForCausalLM", "GraniteMoeForCausalLMFactory",
]
