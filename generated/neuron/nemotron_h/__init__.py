# ==================================================================================================================
# GENERATED FROM specs/nemotron_h.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/nemotron_h.yaml --target neuron
# source hash (spec + templates + generator): fb5cb16d861c6a9b
# ==================================================================================================================
"""NemotronH for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, NemotronHConfig
from .factory import NemotronHForCausalLMFactory
from .model import NemotronHForCausalLM

CONFIG_CLASS = NemotronHConfig
MODEL_CLASS = NemotronHForCausalLM
FACTORY_CLASS = NemotronHForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/nemotron_h.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "NemotronHConfig", "NemotronHForCausalLM", "NemotronHForCausalLMFactory",
]
