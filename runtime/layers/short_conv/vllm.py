"""LFM2 short convolution on the vllm target: vLLM's own ``ShortConv`` built from a spec's values.

vLLM's layer (vllm/model_executor/layers/mamba/short_conv.py) is a ``MambaBase``: it registers itself in the
compilation config's static forward context under its prefix, declares its conv state to vLLM's hybrid KV-cache
manager, reads its ``ShortConvAttentionMetadata`` from the forward context and runs the platform's causal-conv ops
(a torch reference on CPU). It reads ``conv_L_cache`` / ``conv_bias`` from a transformers config; here they come from
the generated config through the spec's expressions.

What this module adds: the attention-slot interface of the generated decoders, ``forward(positions,
hidden_states)`` (position-free: the conv history carries the order), and the hybrid ``*ForCausalLM`` pieces --
vLLM's ``HasInnerState`` / ``IsHybrid`` behind ``nn.Module`` and the state shape / dtype / copy functions vLLM sizes
the state cache with. Imported only by generated vllm modules (vLLM need not be installed for the other targets).
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.layers.mamba.mamba_utils import (
    MambaStateCopyFuncCalculator,
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)
from vllm.model_executor.layers.mamba.short_conv import ShortConv as VllmShortConv
from vllm.model_executor.models.interfaces import HasInnerState, IsHybrid


class HybridShortConvModel(nn.Module, HasInnerState, IsHybrid):
    """Base of a generated ``*ForCausalLM`` with short-conv layers: vLLM's hybrid interfaces behind ``nn.Module``
    (they are typing Protocols, whose ``__init__`` would shadow ``nn.Module``'s were they listed first)."""


class ShortConv(VllmShortConv):
    """vLLM's LFM2 short conv with modelgen's constructor and attention-slot forward. Parameters (checkpoint
    names): ``in_proj`` (``[B | C | x]``, split into vLLM's three output shards by its loader), ``conv.weight``
    ``[hidden, 1, K]`` (and biases with ``bias``), ``out_proj``."""

    def __init__(self, vllm_config: VllmConfig, prefix: str, *, hidden_size: int, conv_kernel: int, bias: bool,
                 layer_idx: int):
        super().__init__(
            SimpleNamespace(conv_L_cache=conv_kernel, conv_bias=bias), dim=hidden_size, layer_idx=layer_idx,
            model_config=vllm_config.model_config, cache_config=vllm_config.cache_config,
            quant_config=vllm_config.quant_config, prefix=prefix,
        )

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        output = torch.empty_like(hidden_states)
        super().forward(hidden_states, output)
        return output


def short_conv_state_dtype(vllm_config: VllmConfig) -> tuple[torch.dtype, ...]:
    """The conv state's dtype: vLLM's rule (the model dtype, or the cache config's override)."""
    return MambaStateDtypeCalculator.short_conv_state_dtype(
        vllm_config.model_config.dtype, vllm_config.cache_config.mamba_cache_dtype
    )


def short_conv_state_shape(vllm_config: VllmConfig, *, hidden_size: int, conv_kernel: int) -> tuple[tuple[int, int]]:
    """Per-rank conv state shape of one request's slot (the K-1 inputs, plus room for speculative tokens)."""
    spec = vllm_config.speculative_config
    return MambaStateShapeCalculator.short_conv_state_shape(
        tp_world_size=vllm_config.parallel_config.tensor_parallel_size, intermediate_size=hidden_size,
        conv_kernel=conv_kernel, num_spec=spec.num_speculative_tokens if spec else 0,
    )


def short_conv_state_copy_func():
    """How vLLM copies a slot's conv state (prefix caching of hybrid models)."""
    return MambaStateCopyFuncCalculator.short_conv_state_copy_func()
