"""The rocm target's attention module: writes K/V into the paged cache, then attends (prefill or decode).

The engine passes an :class:`AttentionMetadata` for the whole (flattened) batch; the module owns no sequence state.
On the torch backend it calls the reference ops in ``runtime/ops/attention.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..ops import attention as ops


@dataclass
class AttentionMetadata:
    """Per-step batch description (flattened tokens ``[num_tokens]``), built by the engine.

    is_prefill    : True when some sequence has more than one new token (varlen path), else decode
    slot_mapping  : [num_tokens] int64 cache slot of each new token (-1 = padding, not written)
    cu_seqlens_q  : [num_seqs + 1] int32 query offsets of each sequence in the flattened batch
    context_lens  : [num_seqs] int32 cached + new tokens of each sequence after this step
    block_tables  : [num_seqs, max_blocks] int32 physical block of each logical block
    max_seqlen_q  : longest query of the batch
    """

    is_prefill: bool
    slot_mapping: torch.Tensor
    cu_seqlens_q: torch.Tensor
    context_lens: torch.Tensor
    block_tables: torch.Tensor
    max_seqlen_q: int


class PagedAttention(nn.Module):
    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float, layer_name: str):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scale = scale
        self.layer_name = layer_name
        self.k_cache: torch.Tensor | None = None  # bound by the engine (bind_kv_cache)
        self.v_cache: torch.Tensor | None = None

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """``q [T, H, D]``, ``k, v [T, KVH, D]`` -> ``[T, H * D]``."""
        if self.k_cache is None:
            raise RuntimeError(f"{self.layer_name}: no KV cache bound (call bind_kv_cache first)")
        ops.write_paged_kv(k, v, self.k_cache, self.v_cache, meta.slot_mapping)
        if meta.is_prefill:
            o = ops.paged_prefill_attention(
                q, self.k_cache, self.v_cache, meta.cu_seqlens_q, meta.context_lens, meta.block_tables, self.scale
            )
        else:
            o = ops.paged_decode_attention(q, self.k_cache, self.v_cache, meta.block_tables, meta.context_lens, self.scale)
        return o.reshape(o.shape[0], self.num_heads * self.head_dim)
