"""MiniMax lightning attention on the vllm target: vLLM's own linear-attention layer, run by modelgen's torch ops.

vLLM's ``MiniMaxText01LinearAttention`` (vllm/model_executor/layers/mamba/linear/minimax_linear_attn.py) is a
``MambaBase``: it registers itself in the compilation config's static forward context under its prefix, declares its
``[heads, D, D]`` state to vLLM's hybrid KV-cache manager (the ``LINEAR`` backend: one state slot per request) and is
called through vLLM's ``linear_attention`` custom op. Its compute is Triton only (no CPU path), and three of its
constants differ from transformers' ``MiniMaxLightningAttention``, the reference: the output norm's eps (1e-5 vs the
RMSNorm default 1e-6), the slopes of a head count that is not a power of two (ALiBi's interpolation vs
``base ** (h + 1)``) and the depth factor (``1 - i / (L - 1)`` vs ``1 - i / (L - 1 + 1e-5)``).

What this module changes: the constructor takes the spec's values (heads, head_dim, block size, depth, norm eps) and
sets transformers' slopes and eps; ``_forward`` runs ``ops.lightning_decode`` / ``ops.lightning_prefill`` over
vLLM's metadata (decode tokens first, then each prefill; a request with no computed token starts from zeros) on any
device; the qkv projection is ``qkv`` (the spec renames the checkpoint's ``qkv_proj``, the fused GQA projection's
name). Plus the hybrid ``*ForCausalLM`` pieces (``HasInnerState`` / ``IsHybrid`` behind ``nn.Module``, the state's
shape / dtype / copy functions). Imported only by generated vllm modules (vLLM need not be installed otherwise).
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn
from vllm.config import VllmConfig
from vllm.forward_context import get_forward_context
from vllm.model_executor.layers.mamba.linear.minimax_linear_attn import MiniMaxText01LinearAttention
from vllm.model_executor.layers.mamba.mamba_utils import (
    MambaStateCopyFuncCalculator,
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)
from vllm.model_executor.models.interfaces import HasInnerState, IsHybrid

from . import ops


class HybridLightningModel(nn.Module, HasInnerState, IsHybrid):
    """Base of a generated ``*ForCausalLM`` with lightning-attention layers: vLLM's hybrid interfaces behind
    ``nn.Module`` (typing Protocols, whose ``__init__`` would shadow ``nn.Module``'s were they listed first)."""


class LightningAttention(MiniMaxText01LinearAttention):
    """vLLM's MiniMax linear attention with modelgen's constructor, transformers' constants and torch compute.
    Parameters: ``qkv`` (per head ``[q | k | v]``), ``output_gate``, ``norm``, ``out_proj``."""

    def __init__(self, vllm_config: VllmConfig, prefix: str, *, hidden_size: int, num_heads: int, head_dim: int,
                 block_size: int, layer_idx: int, num_layers: int, norm_eps: float):
        config = SimpleNamespace(hidden_size=hidden_size, num_attention_heads=num_heads, head_dim=head_dim,
                                 num_hidden_layers=num_layers, block=block_size)
        super().__init__(config, vllm_config, prefix)
        self.layer_idx = layer_idx
        self.norm.variance_epsilon = norm_eps
        slope = ops.slope_rate(num_heads, layer_idx, num_layers)
        self.tp_slope = slope[self.tp_rank * self.tp_heads:(self.tp_rank + 1) * self.tp_heads].contiguous()
        self.qkv = self.qkv_proj
        del self.qkv_proj

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        """The attention slot's interface of the generated decoders (position-free: the decayed state carries the
        order); vLLM's custom op then calls ``_forward``."""
        output = torch.empty_like(hidden_states)
        super().forward(hidden_states, output, positions)
        return output

    def _forward(self, hidden_states: torch.Tensor, output: torch.Tensor, positions: torch.Tensor) -> None:
        meta = get_forward_context().attn_metadata
        meta = meta.get(self.prefix) if isinstance(meta, dict) else None
        if meta is None:  # a profiling run: shapes only
            output.zero_()
            return
        n = meta.num_prefill_tokens + meta.num_decode_tokens
        qkv, _ = self.qkv(hidden_states[:n])
        q, k, v = ops.split_qkv(F.silu(qkv.float()), self.tp_heads, self.head_dim)
        state, slots = self.kv_cache[0], meta.state_indices_tensor
        slope = self.tp_slope.to(q.device)
        o = q.new_zeros(q.shape)
        nd = meta.num_decode_tokens  # vLLM orders a batch's decode requests (one token each) first
        if nd:
            ids = slots[:meta.num_decodes].long()
            o[:nd], new = ops.lightning_decode(q[:nd], k[:nd], v[:nd], state[ids], slope)
            state[ids] = new.to(state.dtype)
        starts, lens = meta.query_start_loc.tolist(), meta.seq_lens.tolist()
        for r in range(meta.num_decodes, meta.num_decodes + meta.num_prefills):
            s, e, slot = starts[r], starts[r + 1], int(slots[r])
            fresh = lens[r] == e - s  # no computed token before this chunk
            prior = state.new_zeros(state.shape[1:]) if fresh else state[slot]
            o[s:e], new = ops.lightning_prefill(q[s:e], k[s:e], v[s:e], prior, slope, self.BLOCK)
            state[slot] = new.to(state.dtype)
        hidden = self.norm._forward(o.flatten(1).to(hidden_states.dtype))
        gate, _ = self.output_gate(hidden_states[:n])
        output[:n], _ = self.out_proj(torch.sigmoid(gate) * hidden)


def lightning_state_dtype(vllm_config: VllmConfig) -> tuple[torch.dtype, ...]:
    """The state's dtype: vLLM's rule (the model dtype, or the cache config's override)."""
    return MambaStateDtypeCalculator.linear_attention_state_dtype(
        vllm_config.model_config.dtype, vllm_config.cache_config.mamba_cache_dtype
    )


def lightning_state_shape(vllm_config: VllmConfig, *, num_heads: int, head_dim: int) -> tuple[tuple[int, int, int]]:
    """Per-rank state shape of one request's slot, ``[heads, D, D]``."""
    return MambaStateShapeCalculator.linear_attention_state_shape(
        num_heads=num_heads, tp_size=vllm_config.parallel_config.tensor_parallel_size, head_dim=head_dim
    )


def lightning_state_copy_func():
    """How vLLM copies a slot's state (prefix caching of hybrid models)."""
    return MambaStateCopyFuncCalculator.linear_attention_state_copy_func()
