"""The activations of the ungated MLP ``down(act(up(x)))`` (codegen/blocks/ungated.py), as transformers' ``ACT2FN``
computes them: plain torch, so every target (rocm, neuron) calls the same reference."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GELUActivation (HF ``gelu``): the exact erf form."""
    return F.gelu(x)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """The tanh approximation (HF ``gelu_pytorch_tanh``; ``gelu_new`` / ``gelu_fast`` spell the same formula)."""
    return F.gelu(x, approximate="tanh")


def relu2(x: torch.Tensor) -> torch.Tensor:
    """ReLUSquaredActivation (HF ``relu2``, Nemotron): ``relu(x) ** 2``."""
    return torch.square(F.relu(x))


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"gelu": gelu, "gelu_tanh": gelu_tanh,
                                                                   "relu2": relu2}
# transformers ACT2FN name -> the entry of ACTIVATIONS computing it (an MLP whose spec reads its activation from the
# config, `activation_from: hidden_act`: GPT-NeoX's gelu / gelu_fast, Falcon's activation)
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh",
                  "relu2": "relu2"}


class Activation(nn.Module):
    """One of :data:`ACTIVATIONS` by name, as a module (so a model prints which one it applies)."""

    def __init__(self, name: str):
        super().__init__()
        if name not in ACTIVATIONS:
            raise ValueError(f"activation {name!r} not in {sorted(ACTIVATIONS)}")
        self.name = name
        self.fn = ACTIVATIONS[name]

    @classmethod
    def from_hf(cls, hf_name: str) -> "Activation":
        """The activation transformers' ``ACT2FN[hf_name]`` computes; ValueError naming it when none does."""
        if hf_name not in HF_ACTIVATIONS:
            raise ValueError(f"activation {hf_name!r} (config) is not generated; known: {sorted(HF_ACTIVATIONS)}")
        return cls(HF_ACTIVATIONS[hf_name])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)

    def extra_repr(self) -> str:
        return self.name
