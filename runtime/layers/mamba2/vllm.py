"""The Mamba-2 mixer on the vllm target: vLLM's own ``MambaMixer2`` built from a spec's values.

vLLM's layer (vllm/model_executor/layers/mamba/mamba_mixer2.py) is a ``MambaBase``: it registers itself in the
compilation config's static forward context under its prefix, declares its conv and SSM states to vLLM's hybrid
KV-cache manager, reads its Mamba-2 attention metadata from the forward context and runs vLLM's SSD / causal-conv
kernels (Triton: vLLM's CPU backend has none for Mamba-2, so the vllm target of a Mamba-2 spec is served on GPUs).
Its sizes come here from the generated config through the spec's expressions.

What this module adds: the attention-slot interface of the generated decoders, ``forward(positions,
hidden_states)`` (position-free: the states carry the order); the checkpoint's ``A_log`` name for vLLM's ``A``
parameter (its loader stores ``-exp(A_log)``); a refusal of a ``time_step_limit`` other than ``(0, inf)``, which
vLLM's kernels do not apply; and the ``*ForCausalLM`` pieces -- vLLM's ``HasInnerState`` with ``IsAttentionFree``
(Mamba-2 alone) or ``IsHybrid`` (beside attention layers) behind ``nn.Module``, and the state shape / dtype / copy
functions vLLM sizes the state cache with. Imported only by generated vllm modules (vLLM need not be installed for
the other targets).
"""
from __future__ import annotations

import math

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.layers.mamba.mamba_mixer2 import MambaMixer2 as VllmMambaMixer2
from vllm.model_executor.layers.mamba.mamba_utils import (
    MambaStateCopyFuncCalculator,
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)
from vllm.model_executor.models.interfaces import HasInnerState, IsAttentionFree, IsHybrid

from .ops import in_scale_vector


class AttentionFreeMamba2Model(nn.Module, HasInnerState, IsAttentionFree):
    """Base of a generated ``*ForCausalLM`` whose every layer is a Mamba-2 mixer (vLLM's interfaces are typing
    Protocols, whose ``__init__`` would shadow ``nn.Module``'s were they listed first)."""


class HybridMamba2Model(nn.Module, HasInnerState, IsHybrid):
    """Base of a generated ``*ForCausalLM`` with Mamba-2 mixers beside attention layers."""


class MambaMixer2(VllmMambaMixer2):
    """vLLM's Mamba-2 mixer with modelgen's constructor and attention-slot forward. Parameters (checkpoint names):
    ``in_proj`` (``[z | xBC | dt]``), ``conv1d`` (``[x | B | C]`` channels), ``dt_bias``, ``A_log``, ``D``,
    ``norm``, ``out_proj``."""

    def __init__(self, vllm_config: VllmConfig, prefix: str, *, hidden_size: int, num_heads: int, head_dim: int,
                 state_size: int, n_groups: int, conv_kernel: int, time_step_limit, use_bias: bool,
                 use_conv_bias: bool, activation: str, eps: float, in_proj_scales=None, out_bias: bool | None = None,
                 gated_norm: bool = True, norm_before_gate: bool = False):
        lo, hi = (float(t) for t in time_step_limit)
        if lo != 0.0 or not math.isinf(hi):
            raise ValueError(f"{prefix}: time_step_limit {(lo, hi)} is not applied by vLLM's Mamba-2 kernels (they "
                             "clamp dt to (0, inf)); serve this checkpoint with the rocm or neuron target")
        if gated_norm and norm_before_gate:
            raise ValueError(f"{prefix}: norm_before_gate (RMSNorm(y) * silu(z)) is not what vLLM's gated norm "
                             "computes (RMSNorm(y * silu(z))); serve this checkpoint with the rocm or neuron target")
        if out_bias is not None and bool(out_bias) != bool(use_bias):
            raise ValueError(f"{prefix}: an out_proj bias ({out_bias}) unlike in_proj's ({use_bias}) is not built by "
                             "vLLM's MambaMixer2 (one use_bias); serve this checkpoint with the rocm or neuron target")
        super().__init__(
            hidden_size=hidden_size, ssm_state_size=state_size, conv_kernel_size=conv_kernel,
            intermediate_size=num_heads * head_dim, use_conv_bias=use_conv_bias, use_bias=use_bias,
            n_groups=n_groups, num_heads=num_heads, head_dim=head_dim, rms_norm_eps=eps, activation=activation,
            use_rms_norm=gated_norm, model_config=vllm_config.model_config, cache_config=vllm_config.cache_config,
            quant_config=vllm_config.quant_config, prefix=prefix,
        )
        self.register_buffer("in_scale", None, persistent=False)  # Falcon-H1's mup_vector (None: no factors)
        if in_proj_scales is not None:
            tp = self.tp_size
            intermediate, gn = num_heads * head_dim, n_groups * state_size
            # vLLM replicates B / C on every rank when the world size does not divide n_groups (n_groups 1)
            gn_local = gn // tp if n_groups % tp == 0 else gn
            local = [intermediate // tp, intermediate // tp, gn_local, gn_local, num_heads // tp]
            scale = in_scale_vector([n * tp for n in local], in_proj_scales, tp, prefix)
            self.register_buffer("in_scale", scale, persistent=False)
        # The checkpoint's name: vLLM's own Mamba-2 models rename A_log -> A when loading; here the parameter
        # keeps the checkpoint's name and vLLM's code reaches it as ``self.A`` (the property below).
        self.register_parameter("A_log", self._parameters.pop("A"))

    @property
    def A(self) -> torch.Tensor:  # noqa: N802 (vLLM's name)
        return self.A_log

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        return super().forward(hidden_states, mup_vector=self.in_scale)


def mamba2_state_dtype(vllm_config: VllmConfig) -> tuple[torch.dtype, ...]:
    """The conv and SSM states' dtypes: vLLM's rule (the model dtype, or the cache config's overrides)."""
    cache = vllm_config.cache_config
    return MambaStateDtypeCalculator.mamba2_state_dtype(
        vllm_config.model_config.dtype, cache.mamba_cache_dtype, cache.mamba_ssm_cache_dtype
    )


def mamba2_state_shape(vllm_config: VllmConfig, *, num_heads: int, head_dim: int, state_size: int, n_groups: int,
                       conv_kernel: int) -> tuple[tuple[int, int], tuple[int, int, int]]:
    """Per-rank conv and SSM state shapes of one request's slot (plus room for speculative tokens)."""
    return MambaStateShapeCalculator.mamba2_state_shape(
        tp_world_size=vllm_config.parallel_config.tensor_parallel_size, intermediate_size=num_heads * head_dim,
        n_groups=n_groups, num_heads=num_heads, head_dim=head_dim, state_size=state_size, conv_kernel=conv_kernel,
        num_spec=vllm_config.num_speculative_tokens,
    )


def mamba2_state_copy_func():
    """How vLLM copies a slot's states (prefix caching of hybrid models)."""
    return MambaStateCopyFuncCalculator.mamba2_state_copy_func()
