# ==================================================================================================================
# GENERATED FROM specs/gpt_neox.yaml BY modelgen 0.1.0 (target: rocm) -- DO NOT EDIT.
# Edit the spec or templates/rocm/ and run: modelgen build specs/gpt_neox.yaml --target rocm
# source hash (spec + templates + generator): aeb2b996043dc05a
# ==================================================================================================================
"""GPTNeoX for the rocm target. See README.md."""
from .config import ARCHITECTURES, GPTNeoXConfig
from .model import GPTNeoXForCausalLM

CONFIG_CLASS = GPTNeoXConfig
MODEL_CLASS = GPTNeoXForCausalLM
SPEC = "specs/gpt_neox.yaml"

__all__ = ["ARCHITECTURES", "CONFIG_CLASS", "MODEL_CLASS", "SPEC", "GPTNeoXConfig", "GPTNeoXForCausalLM"]
