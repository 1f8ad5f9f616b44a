"""DeepSeek Sparse Attention (DSA) pieces of the generated vllm ``mla`` attention: vLLM's own indexer with the
checkpoint's parameter names, and the per-model top-k buffers its sparse MLA layers share.

The generated attention (templates/vllm/blocks/mla.py.j2) runs vLLM's ``MLAAttention`` (latent KV cache, vLLM's MLA
backends, ``kv_b_proj`` absorbed by the backend after loading). With DSA (DeepSeek-V3.2, GLM-5) it adds:

* :class:`DSAIndexer`: vLLM's ``Indexer`` (deepseek_v2.py: its FP8 index-key cache ``DeepseekV32IndexerCache`` and
  its ``SparseAttnIndexer`` op writing each token's top-``index_topk`` keys into the shared buffer), except that
  vLLM fuses ``wk`` and ``weights_proj`` into one ``wk_weights_proj`` GEMM. Here they stay two ``ReplicatedLinear``
  under the checkpoint's names (``indexer.{wq_b, wk, k_norm, weights_proj}``), so the generated loader tables map
  them one to one; the indexer's forward reads their concatenation exactly where it read the fused GEMM.
* :func:`sparse_buffers`: the ``[max_num_batched_tokens, index_topk]`` top-k indices buffer and vLLM's
  ``SparseMLAIndexGroupBuilder``, one per model (vLLM's ``DeepseekV2Model`` builds them once and hands them to every
  layer). A shared DSA layer (GLM-5 ``indexer_types: shared``; vLLM's ``skip_topk``) has no indexer and reads the
  top-k the nearest earlier indexer left in that buffer during the same forward pass.

vLLM's CPU build has no sparse MLA backend (``CpuPlatform.get_attn_backend_cls`` raises "Sparse Attention is not
supported on CPU."), so DSA models are built and served by vLLM on GPU platforms only.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from torch import nn


def _indexer_base() -> type:
    from vllm.model_executor.models.deepseek_v2 import Indexer

    return Indexer


class _Fused:
    """``wk_weights_proj(x)`` as vLLM's indexer calls it: ``([wk(x) | weights_proj(x)], None)`` (a plain attribute,
    not a module: the parameters stay registered under ``wk`` / ``weights_proj`` only)."""

    def __init__(self, owner: nn.Module):
        self._owner = [owner]  # a list: nn.Module would register a module attribute

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        ix = self._owner[0]
        k, _ = ix.wk(x)
        w, _ = ix.weights_proj(x)
        return torch.cat([k, w], dim=-1), None


def DSAIndexer(
    vllm_config: Any,
    *,
    hidden_size: int,
    q_lora_rank: int,
    num_heads: int,
    head_dim: int,
    topk: int,
    rope_dim: int,
    topk_indices_buffer: torch.Tensor,
    prefix: str,
    is_inplace_rope: bool = False,
) -> nn.Module:
    """vLLM's DSA ``Indexer`` for one layer, with ``wk`` and ``weights_proj`` as separate checkpoint-named linears."""
    from vllm.model_executor.layers.linear import ReplicatedLinear

    # vLLM's Indexer reads its sizes off the HF config; the spec's values stand in for it.
    sizes = SimpleNamespace(index_topk=topk, index_n_heads=num_heads, index_head_dim=head_dim,
                            qk_rope_head_dim=rope_dim)
    indexer = _indexer_base()(
        vllm_config, sizes, hidden_size, q_lora_rank, vllm_config.quant_config, vllm_config.cache_config,
        topk_indices_buffer, prefix, is_inplace_rope=is_inplace_rope,
    )
    del indexer.wk_weights_proj
    indexer.wk = ReplicatedLinear(hidden_size, head_dim, bias=False, quant_config=None, prefix=f"{prefix}.wk")
    indexer.weights_proj = ReplicatedLinear(hidden_size, num_heads, bias=False, quant_config=None,
                                            prefix=f"{prefix}.weights_proj")
    indexer.wk_weights_proj = _Fused(indexer)
    return indexer


_BUFFERS: dict[int, tuple[Any, torch.Tensor, Any]] = {}


def sparse_buffers(vllm_config: Any, topk: int) -> tuple[torch.Tensor, Any]:
    """``(topk_indices_buffer, index_group_builder)`` of the model ``vllm_config`` builds: made by its first DSA
    layer, the same objects for every later one (the top-k an indexer writes is what the shared layers read)."""
    got = _BUFFERS.get(id(vllm_config))
    if got is not None and got[0] is vllm_config:
        if got[1].shape[1] != topk:
            raise ValueError(f"DSA layers disagree on index_topk: {got[1].shape[1]} and {topk}")
        return got[1], got[2]
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.mla.index_group import (
        SparseMLAIndexGroupBuilder,
        get_sparse_mla_index_group_max_rows,
    )

    buffer = torch.empty(vllm_config.scheduler_config.max_num_batched_tokens, topk, dtype=torch.int32,
                         device=current_platform.device_type)
    builder = SparseMLAIndexGroupBuilder(buffer, get_sparse_mla_index_group_max_rows(vllm_config))
    _BUFFERS.clear()  # one model at a time: the previous model's buffers are not kept alive
    _BUFFERS[id(vllm_config)] = (vllm_config, buffer, builder)
    return buffer, builder
