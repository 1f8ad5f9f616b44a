"""Multi-head latent attention (DeepSeek-V2/V3 MLA) over a paged latent cache: torch ops shared by both targets.

The cache holds, per token and layer, one vector ``[c_kv (kv_lora_rank) | k_pe (qk_rope_head_dim)]``: the
kv_a_layernorm'd compressed KV and the shared, already rotated, RoPE key. Layout ``[num_blocks, block_size, D]``
(``D = kv_lora_rank + qk_rope_head_dim``); token slot ``s`` lives in block ``s // block_size`` at offset
``s % block_size``; slot ``-1`` marks padding and is never written.

Attention runs in the weight-absorbed form (DeepSeek-V2 paper, sec. 2.1.3; vLLM/ATOM's MLA decode). With
``kv_b_proj.weight`` viewed as ``[H, dn + dv, r]`` = ``[W_UK | W_UV]`` per head,

    q_nope . k_nope_j = q_nope . (W_UK c_j) = (W_UK^T q_nope) . c_j         (absorb_query)
    sum_j p_j v_j     = W_UV (sum_j p_j c_j)                                (expand_output)

so every head attends the *same* single-"head" key ``[c_j | k_pe_j]`` with the query ``[W_UK^T q_nope | q_pe]`` and
the value ``c_j``: one shared KV head (``enable_gqa``), value dim ``r``. That is HF's un-absorbed math
(``DeepseekV3Attention.expand_kv``) reassociated; tests/test_mla_ops.py checks both agree.

DeepSeek Sparse Attention (DSA: V3.2, GLM-5) adds an indexer: per token a key ``k_idx [Di]`` (stored after the latent in
the same cache row, so a row is ``[c | k_pe | k_idx]``) and per query ``q_idx [Hi, Di]`` with head weights ``w [Hi]``.
The index score of query i and key j is ``sum_h w_h * relu(q_idx_h . k_idx_j)`` (``Di ** -0.5`` and ``Hi ** -0.5``
folded into ``w``), masked causally *before* the per-query top-``index_topk`` (DeepSeek's inference code); attention
then runs only over the selected keys. Every attention function takes that as ``index=(q_idx, w, topk)``.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F


def softmax_scale(qk_head_dim: int, rope_scaling: dict[str, Any] | None) -> float:
    """``qk_head_dim ** -0.5``, times ``mscale(factor, mscale_all_dim) ** 2`` for a scaled RoPE that sets
    ``mscale_all_dim`` (HF ``yarn_apply_mscale`` in modeling_deepseek_v3.py; ``mscale`` alone only changes the
    cos/sin attention factor, see runtime/ops/rope.py)."""
    scale = qk_head_dim ** -0.5
    if rope_scaling and rope_scaling.get("rope_type", "default") != "default":
        mscale_all_dim = rope_scaling.get("mscale_all_dim") or 0
        factor = float(rope_scaling.get("factor") or 1.0)
        if mscale_all_dim and factor > 1:
            mscale = 0.1 * mscale_all_dim * math.log(factor) + 1.0
            scale = scale * mscale * mscale
    return scale


def rope_style(interleave: bool, style: str = "rotate_half") -> str:
    """HF ``rope_interleave``: DeepSeek checkpoints pair rope dims (2i, 2i+1) ("pairwise"); otherwise ``style``.
    HF's interleaved apply also de-interleaves its output ([even | odd]); q and k are permuted alike, so q.k and
    therefore attention equal ours, which keeps pairs in place."""
    return "pairwise" if interleave else style


# ------------------------------------------------------------------------------------------------ weight absorption
def split_kv_b(kv_b: torch.Tensor, num_heads: int, nope_dim: int, v_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``kv_b_proj.weight [H * (dn + dv), r]`` (HF layout: per head, dn key rows then dv value rows) ->
    ``W_UK [H, dn, r]``, ``W_UV [H, dv, r]`` (views, no copy)."""
    w = kv_b.view(num_heads, nope_dim + v_dim, kv_b.shape[-1])
    return w[:, :nope_dim], w[:, nope_dim:]


def absorb_query(q_nope: torch.Tensor, w_uk: torch.Tensor) -> torch.Tensor:
    """``q_nope [T, H, dn]`` -> ``[T, H, r]``: the query in latent space (W_UK^T q per head)."""
    return torch.einsum("thd,hdr->thr", q_nope, w_uk.to(q_nope.dtype))


def expand_output(o_latent: torch.Tensor, w_uv: torch.Tensor) -> torch.Tensor:
    """``o_latent [T, H, r]`` (attention-weighted latents) -> ``[T, H, dv]`` through W_UV."""
    return torch.einsum("thr,hvr->thv", o_latent, w_uv.to(o_latent.dtype))


# --------------------------------------------------------------------------------------------------------- cache I/O
def write_latent(latent: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Eager write of ``latent [T, D]`` at ``slot_mapping`` (padding slots dropped)."""
    block_size = cache.shape[1]
    keep = slot_mapping >= 0
    if not bool(keep.all()):
        latent, slot_mapping = latent[keep], slot_mapping[keep]
    cache[slot_mapping // block_size, slot_mapping % block_size] = latent.to(cache.dtype)


def write_latent_static(latent: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Shape-static write for traced graphs: as runtime/layers/attention/ops.py ``write_paged_kv_static`` (subtract the
    old value, add the new, both with ``accumulate=True``; padding tokens add exact zeros to slot 0)."""
    block_size = cache.shape[1]
    valid = (slot_mapping >= 0)[:, None]
    slots = slot_mapping.clamp(min=0)
    index = (slots // block_size, slots % block_size)
    old = cache[index]
    zero = torch.zeros_like(old)
    cache.index_put_(index, torch.where(valid, -old, zero), accumulate=True)
    cache.index_put_(index, torch.where(valid, latent.to(cache.dtype), zero), accumulate=True)


def gather_latent(cache: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """``[..., max_blocks]`` block ids -> ``[..., max_blocks * block_size, D]`` (dense, padded)."""
    return cache[block_table].flatten(-3, -2)


# ----------------------------------------------------------------------------------------------------- DSA indexer
Index = tuple[torch.Tensor, torch.Tensor, int]  # (q_idx [T, Hi, Di], w [T, Hi], index_topk)


def index_inputs(
    q_idx: torch.Tensor, k_idx: torch.Tensor, weights: torch.Tensor, k_norm_weight: torch.Tensor,
    k_norm_bias: torch.Tensor, cos_sin: torch.Tensor, positions: torch.Tensor, rope_dim: int, style: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The indexer's projections (``wq_b(q_resid) [T, Hi * Di]``, ``wk(x) [T, Di]``, ``weights_proj(x) [T, Hi]``) ->
    ``q_idx [T, Hi, Di]``, ``k_idx [T, Di]`` (LayerNorm ``k_norm``, eps 1e-6), float32 head weights ``[T, Hi]``.
    RoPE rotates the first ``rope_dim`` dims of each (HF ``DeepseekV32Indexer``: half-split; GLM-5: interleaved)."""
    from ...ops.rope import apply_rope

    T, Di = k_idx.shape
    q_idx = apply_rope(q_idx.view(T, -1, Di), cos_sin, positions, rope_dim, style)
    k_idx = F.layer_norm(k_idx, (Di,), k_norm_weight, k_norm_bias, 1e-6)
    k_idx = apply_rope(k_idx[:, None, :], cos_sin, positions, rope_dim, style)[:, 0]
    w = weights.float() * (q_idx.shape[1] ** -0.5 * Di ** -0.5)  # relu(s * x) = s * relu(x) for s > 0
    return q_idx, k_idx, w


def _select(mask: torch.Tensor, q_idx: torch.Tensor, w: torch.Tensor, k_idx: torch.Tensor, topk: int) -> torch.Tensor:
    """``mask [..., n, L]`` (causal / valid keys) narrowed to each query's top-``topk`` index scores among them.
    ``q_idx [..., n, Hi, Di]``, ``w [..., n, Hi]``, ``k_idx [..., L, Di]``; scores in float32."""
    per_head = torch.einsum("...nhd,...ld->...nhl", q_idx.float(), k_idx.float()).relu()
    score = torch.einsum("...nh,...nhl->...nl", w.float(), per_head).masked_fill(~mask, float("-inf"))
    top = score.topk(min(topk, score.shape[-1]), dim=-1).indices
    return mask & torch.zeros_like(mask).scatter(-1, top, True)


# --------------------------------------------------------------------------------------------------------- attention
def _attend(q: torch.Tensor, kv: torch.Tensor, latent_dim: int, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """``q [..., H, Lq, D]`` over the shared latent ``kv [..., S, >= D]`` (key: its first D, value: its first
    ``latent_dim``; an index key after D is ignored) -> ``[..., H, Lq, latent_dim]``."""
    kv = kv[..., : q.shape[-1]].to(q.dtype).unsqueeze(-3)  # one KV head shared by all query heads
    return F.scaled_dot_product_attention(q, kv, kv[..., :latent_dim], attn_mask=mask, scale=scale, enable_gqa=True)


def paged_prefill(
    q: torch.Tensor,
    cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    context_lens: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    latent_dim: int,
    index: Index | None = None,
) -> torch.Tensor:
    """Varlen causal attention of flattened queries ``q [T, H, D]`` (absorbed) over the paged latents; sequence b's
    rows are its last ``n`` tokens of ``context_lens[b]`` (chunked prefill continues over cached latents). Eager."""
    out = q.new_empty(q.shape[0], q.shape[1], latent_dim)
    block_size = cache.shape[1]
    starts, ctx = cu_seqlens_q.tolist(), context_lens.tolist()
    for b in range(len(ctx)):
        s, e = starts[b], starts[b + 1]
        n, c = e - s, ctx[b]
        if n == 0:
            continue
        kv = gather_latent(cache, block_tables[b, : (c + block_size - 1) // block_size])[:c]  # [c, D]
        qpos = torch.arange(c - n, c, device=q.device)
        mask = torch.arange(c, device=q.device)[None, :] <= qpos[:, None]  # [n, c]
        if index is not None:
            mask = _select(mask, index[0][s:e], index[1][s:e], kv[:, q.shape[-1]:], index[2])
        out[s:e] = _attend(q[s:e].transpose(0, 1), kv, latent_dim, mask, scale).transpose(0, 1)
    return out


def paged_decode(
    q: torch.Tensor,
    cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    latent_dim: int,
    index: Index | None = None,
) -> torch.Tensor:
    """:func:`paged_decode_ref`; on a GPU (``runtime/ops/gpu.enabled``) the Triton flash-decoding kernel of
    ``runtime/layers/mla/kernels.py``, which reads the paged latents in place instead of gathering them (DSA's sparse
    selection, ``index``, stays on the reference)."""
    if index is None:
        from ...ops import gpu

        if gpu.enabled(q):
            from . import kernels as gpu_mla

            return gpu_mla.paged_decode(q, cache, block_tables, context_lens, scale, latent_dim)
    return paged_decode_ref(q, cache, block_tables, context_lens, scale, latent_dim, index)


def paged_decode_ref(
    q: torch.Tensor,
    cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    latent_dim: int,
    index: Index | None = None,
) -> torch.Tensor:
    """One query per sequence, ``q [B, H, D]`` -> ``[B, H, latent_dim]`` over its first ``context_lens[b]`` latents.
    Shape-static (no host reads): the decode step of both targets."""
    kv = gather_latent(cache, block_tables)  # [B, L, D]
    mask = (torch.arange(kv.shape[1], device=q.device)[None, :] < context_lens[:, None])[:, None, :]  # [B, 1, L]
    if index is not None:
        mask = _select(mask, index[0][:, None], index[1][:, None], kv[..., q.shape[-1]:], index[2])
    return _attend(q[:, :, None, :], kv, latent_dim, mask[:, None], scale)[:, :, 0, :]


def packed_prefill(
    q: torch.Tensor, latent: torch.Tensor, seq_ids: torch.Tensor, positions: torch.Tensor, scale: float,
    latent_dim: int, index: Index | None = None,
) -> torch.Tensor:
    """Shape-static causal attention among one packed prefill bucket's tokens (no cached prefix): token i attends j
    when both belong to one request (``seq_ids``, -1 = padding) and ``positions[j] <= positions[i]``; padding rows
    attend only themselves (finite softmax, never sampled)."""
    T = q.shape[0]
    same = (seq_ids[:, None] == seq_ids[None, :]) & (seq_ids[None, :] >= 0)
    mask = (same & (positions[None, :] <= positions[:, None])) | torch.eye(T, dtype=torch.bool, device=q.device)
    if index is not None:
        mask = _select(mask, index[0], index[1], latent[:, q.shape[-1]:], index[2])
    return _attend(q.transpose(0, 1), latent, latent_dim, mask, scale).transpose(0, 1)


def segment_prefill(
    q: torch.Tensor,
    cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_ids: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
    latent_dim: int,
    index: Index | None = None,
) -> torch.Tensor:
    """Shape-static segmented (chunked) prefill: each token of a chunk gathers its request's block-table row and
    attends the cached latents ``<= positions[i]`` (the chunk's own already written). Padding tokens attend slot 0."""
    valid = seq_ids >= 0
    tables = block_tables.index_select(0, seq_ids.clamp(min=0).long())  # [T, W]
    kv = gather_latent(cache, tables)  # [T, L, D]
    j = torch.arange(kv.shape[1], device=q.device)[None, :]
    mask = ((j <= positions[:, None]) & valid[:, None] | (j == 0) & ~valid[:, None])[:, None, :]  # [T, 1, L]
    if index is not None:
        mask = _select(mask, index[0][:, None], index[1][:, None], kv[..., q.shape[-1]:], index[2])
    return _attend(q[:, :, None, :], kv, latent_dim, mask[:, None], scale)[:, :, 0, :]
