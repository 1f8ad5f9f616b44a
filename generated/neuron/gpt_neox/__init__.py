# ==================================================================================================================
# GENERATED FROM specs/gpt_neox.yaml BY modelgen 0.1.0 (target: neuron) -- DO NOT EDIT.
# Edit the spec or templates/neuron/ and run: modelgen build specs/gpt_neox.yaml --target neuron
# source hash (spec + templates + generator): aeb2b996043dc05a
# ==================================================================================================================
"""GPTNeoX for the neuron target (vLLM Neuron plugin layout: config.py, factory.py, model.py). See README.md."""
from .config import ARCHITECTURES, GPTNeoXConfig
from .factory import GPTNeoXForCausalLMFactory
from .model import GPTNeoXForCausalLM

CONFIG_CLASS = GPTNeoXConfig
MODEL_CLASS = GPTNeoXForCausalLM
FACTORY_CLASS = GPTNeoXForCausalLMFactory  # the engine builds the model through it (vLLM Neuron guide, step 1c)
SPEC = "specs/gpt_neox.yaml"

__all__ = [
    "ARCHITECTURES", "CONFIG_CLASS", "FACTORY_CLASS", "MODEL_CLASS", "SPEC",
    "GPTNeoXConfig", "GPTNeoXForCausalLM", "GPTNeoXForCausalLMFactory",
]
