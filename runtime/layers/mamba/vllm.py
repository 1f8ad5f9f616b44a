"""Mamba-1 mixer on the vllm target: vLLM's own ``MambaMixer`` built from a spec's values.

vLLM's layer (vllm/model_executor/layers/mamba/mamba_mixer.py, the one its Jamba and Mamba models use) is a
``MambaBase``: it registers itself in the compilation config's static forward context under its prefix, declares its
conv and SSM states to vLLM's hybrid KV-cache manager, reads its ``Mamba1AttentionMetadata`` from the forward context
and runs the platform's causal-conv and selective-scan ops. Its sizes come here from the generated config through the
spec's expressions instead of a transformers config.

What this module adds: the attention-slot interface of the generated decoders, ``forward(positions,
hidden_states)`` (position-free: the states carry the order); the checkpoint's name ``A_log`` for vLLM's parameter
``A`` (vLLM's loader of it stores ``-exp(A_log)``); and the ``*ForCausalLM`` pieces -- vLLM's ``HasInnerState`` with
``IsHybrid`` (beside attention layers) or ``IsAttentionFree`` (Mamba alone) behind ``nn.Module``, and the state shape /
dtype / copy functions vLLM sizes the state cache with. Imported only by generated vllm modules (vLLM need not be installed for the other targets).
"""
from __future__ import annotations

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.layers.mamba.mamba_mixer import MambaMixer as VllmMambaMixer
from vllm.model_executor.layers.mamba.mamba_utils import (
    MambaStateCopyFuncCalculator,
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)
from vllm.model_executor.models.interfaces import HasInnerState, IsAttentionFree, IsHybrid


class HybridMambaModel(nn.Module, HasInnerState, IsHybrid):
    """Base of a generated ``*ForCausalLM`` with Mamba-1 layers beside attention layers: vLLM's hybrid interfaces
    behind ``nn.Module`` (they are typing Protocols, whose ``__init__`` would shadow ``nn.Module``'s were they listed
    first)."""


class AttentionFreeMambaModel(nn.Module, HasInnerState, IsAttentionFree):
    """Base of a generated ``*ForCausalLM`` whose every layer is a Mamba-1 mixer (vLLM's ``MambaForCausalLM``)."""


class MambaMixer(VllmMambaMixer):
    """vLLM's Mamba-1 mixer with modelgen's constructor and attention-slot forward. Parameters (checkpoint names):
    ``in_proj`` (``[x | z]``, split into vLLM's two output shards by its loader), ``conv1d.weight`` ``[D, 1, K]``,
    ``x_proj``, ``dt_proj``, ``A_log``, ``D``, ``out_proj``, and with ``rms_norm_eps`` Jamba's ``dt_layernorm``,
    ``b_layernorm``, ``c_layernorm``."""

    def __init__(self, vllm_config: VllmConfig, prefix: str, *, hidden_size: int, intermediate_size: int,
                 state_size: int, conv_kernel: int, time_step_rank: int, conv_bias: bool, proj_bias: bool,
                 rms_norm_eps: float | None = None):
        super().__init__(
            hidden_size=hidden_size, ssm_state_size=state_size, conv_kernel_size=conv_kernel,
            intermediate_size=intermediate_size, time_step_rank=time_step_rank, use_conv_bias=conv_bias,
            use_bias=proj_bias, use_rms_norm=rms_norm_eps is not None,
            rms_norm_eps=rms_norm_eps if rms_norm_eps is not None else 1e-5, activation="silu",
            is_lora_enabled=bool(vllm_config.lora_config), model_config=vllm_config.model_config,
            cache_config=vllm_config.cache_config, prefix=prefix,
        )
        # The checkpoint calls it A_log; vLLM's weight_loader on it stores -exp(A_log), which vLLM's forward reads as A.
        self.A_log = self._parameters.pop("A")

    @property
    def A(self) -> torch.Tensor:
        return self.A_log

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        output = torch.empty_like(hidden_states)
        super().forward(hidden_states, output)
        return output


def mamba_state_dtype(vllm_config: VllmConfig) -> tuple[torch.dtype, torch.dtype]:
    """(conv state, SSM state) dtypes: vLLM's rule (the model dtype, or the cache config's overrides)."""
    cache = vllm_config.cache_config
    return MambaStateDtypeCalculator.mamba1_state_dtype(
        vllm_config.model_config.dtype, cache.mamba_cache_dtype, cache.mamba_ssm_cache_dtype
    )


def mamba_state_shape(vllm_config: VllmConfig, *, intermediate_size: int, state_size: int,
                      conv_kernel: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Per-rank (conv state, SSM state ``[D, d_state]``) shapes of one request's slot."""
    return MambaStateShapeCalculator.mamba1_state_shape(
        tp_world_size=vllm_config.parallel_config.tensor_parallel_size, intermediate_size=intermediate_size,
        state_size=state_size, conv_kernel=conv_kernel,
    )


def mamba_state_copy_func():
    """How vLLM copies a slot's (conv, SSM) state (prefix caching of hybrid models)."""
    return MambaStateCopyFuncCalculator.mamba1_state_copy_func()
