# ==================================================================================================================
# GENERATED FROM specs/smollm3.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/smollm3.yaml --target neuron
# source hash (spec + templates + generator): f9eaf7361fde32bb
# ==================================================================================================================
"""SmolLM3 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, SmolLM3Config
from .factory import SmolLM3ForCausalLMFactory
from .model import SmolLM3ForCausalLM

CONFIG_CLASS = SmolLM3Config
MODEL_CLASS = SmolLM3ForCausalLM
FACTORY_CLASS = SmolLM3ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/smollm3.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "SmolLM3Config", "SmolLM3ForCausalLM", "SmolLM3ForCausalLMFactory",
]
