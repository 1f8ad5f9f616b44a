# ==================================================================================================================
# GENERATED FROM specs/falcon_h1.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/falcon_h1.yaml --target neuron
# source hash (spec + templates + generator): c6d883bdd38a51b9
# ==================================================================================================================
"""FalconH1 for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, FalconH1Config
from .factory import FalconH1ForCausalLMFactory
from .model import FalconH1ForCausalLM

CONFIG_CLASS = FalconH1Config
MODEL_CLASS = FalconH1ForCausalLM
FACTORY_CLASS = FalconH1ForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/falcon_h1.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "FalconH1Config", "FalconH1ForCausalLM", "FalconH1ForCausalLMFactory",
]
