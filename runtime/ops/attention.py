"""Attention over a paged KV cache: torch reference implementations shared by both targets.

Cache layout (vLLM Neuron's HND): ``k_cache, v_cache: [num_blocks, num_kv_heads, block_size, head_dim]``; token slot
``s`` lives in block ``s // block_size`` at offset ``s % block_size``. Slot ``-1`` marks padding: never written.

Softmax runs through ``scaled_dot_product_attention`` (math/flash kernels on CPU/GPU, traceable by dynamo) with
``enable_gqa`` so KV heads are broadcast to their query groups without materialising repeated K/V.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


# ---------------------------------------------------------------------------------------------------------- cache I/O
def write_paged_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Eager write of ``k, v [tokens, kv_heads, head_dim]`` at ``slot_mapping`` (padding slots dropped)."""
    block_size = k_cache.shape[2]
    keep = slot_mapping >= 0
    if not bool(keep.all()):
        k, v, slot_mapping = k[keep], v[keep], slot_mapping[keep]
    blocks, offsets = slot_mapping // block_size, slot_mapping % block_size
    k_cache[blocks, :, offsets] = k.to(k_cache.dtype)
    v_cache[blocks, :, offsets] = v.to(v_cache.dtype)


def write_paged_kv_static(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Shape-static write for traced graphs: padding tokens (slot -1) leave the cache bit-for-bit unchanged.

    A boolean filter would make the shape data-dependent, so every token scatters with ``accumulate=True``: first
    ``-old`` (zeroing the real slots exactly), then ``new``; padding tokens add exact zeros to slot 0. The cache must
    start zero-filled (no NaN/Inf garbage), which the engine guarantees.
    """
    block_size = k_cache.shape[2]
    valid = (slot_mapping >= 0)[:, None, None]
    slots = slot_mapping.clamp(min=0)
    heads = torch.arange(k_cache.shape[1], device=slots.device)[None, :]
    index = ((slots // block_size)[:, None], heads, (slots % block_size)[:, None])
    for new, cache in ((k, k_cache), (v, v_cache)):
        old = cache[index]
        zero = torch.zeros_like(old)
        cache.index_put_(index, torch.where(valid, -old, zero), accumulate=True)
        cache.index_put_(index, torch.where(valid, new.to(cache.dtype), zero), accumulate=True)


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """``[..., max_blocks]`` block ids -> ``[..., kv_heads, max_blocks * block_size, head_dim]`` (dense, padded)."""
    g = cache[block_table]  # [..., M, KVH, bs, D]
    g = g.movedim(-3, -4)  # [..., KVH, M, bs, D]
    return g.flatten(-3, -2)


# -------------------------------------------------------------------------------------------------------- attention
def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One query token per sequence: ``q [batch, heads, head_dim]`` -> ``[batch, heads, head_dim]``.

    Each query attends to the first ``context_lens[b]`` cached positions of its sequence (its own K/V included).
    """
    k = gather_kv(k_cache, block_tables)  # [B, KVH, L, D]
    v = gather_kv(v_cache, block_tables)
    L = k.shape[-2]
    mask = torch.arange(L, device=q.device)[None, :] < context_lens[:, None]  # [B, L]
    out = F.scaled_dot_product_attention(
        q[:, :, None, :], k.to(q.dtype), v.to(q.dtype), attn_mask=mask[:, None, None, :], scale=scale, enable_gqa=True
    )
    return out[:, :, 0, :]


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    context_lens: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Varlen causal attention for flattened queries ``q [tokens, heads, head_dim]`` over the paged cache.

    Sequence ``b`` owns query rows ``cu_seqlens_q[b]:cu_seqlens_q[b+1]``, which are its *last* tokens: its context
    holds ``context_lens[b]`` positions (earlier cached ones plus these), so chunked prefill and prefix reuse work
    unchanged. Eager (loops over sequences); the GPU path replaces it with a kernel.
    """
    out = torch.empty_like(q)
    block_size = k_cache.shape[2]
    starts = cu_seqlens_q.tolist()
    ctx = context_lens.tolist()
    for b in range(len(ctx)):
        s, e = starts[b], starts[b + 1]
        n, c = e - s, ctx[b]
        if n == 0:
            continue
        nblocks = (c + block_size - 1) // block_size
        k = gather_kv(k_cache, block_tables[b, :nblocks])[:, :c].to(q.dtype)  # [KVH, c, D]
        v = gather_kv(v_cache, block_tables[b, :nblocks])[:, :c].to(q.dtype)
        qpos = torch.arange(c - n, c, device=q.device)
        mask = torch.arange(c, device=q.device)[None, :] <= qpos[:, None]  # [n, c]
        o = F.scaled_dot_product_attention(
            q[s:e].transpose(0, 1), k, v, attn_mask=mask, scale=scale, enable_gqa=True
        )  # [H, n, D]
        out[s:e] = o.transpose(0, 1)
    return out


def packed_prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_ids: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Shape-static causal attention among the tokens of one packed prefill bucket (no cached prefix).

    ``q [T, H, D]``, ``k, v [T, KVH, D]``; token i attends token j when both belong to the same request
    (``seq_ids``, -1 = padding) and ``positions[j] <= positions[i]``. Padding rows attend only to themselves so
    softmax stays finite; their outputs are never sampled.
    """
    T = q.shape[0]
    same = (seq_ids[:, None] == seq_ids[None, :]) & (seq_ids[None, :] >= 0)
    causal = positions[None, :] <= positions[:, None]
    eye = torch.eye(T, dtype=torch.bool, device=q.device)
    mask = (same & causal) | eye
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
        attn_mask=mask[None, None], scale=scale, enable_gqa=True,
    )
    return out[0].transpose(0, 1)


def paged_segment_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_ids: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Shape-static segmented (chunked) prefill: ``q [T, H, D]`` of one chunk per request, whose K/V are already in
    the cache after the request's earlier chunks; token i attends its request's cached positions ``<= positions[i]``.

    Each token gathers its request's block-table row (``block_tables [R, W]`` -> ``[T, KVH, W * block_size, D]``), so
    memory grows with tokens x context window: the CPU reference of what a segmented-attention kernel does on device.
    Padding tokens (``seq_ids`` -1) attend only position 0 of row 0, keeping softmax finite; they are never sampled.
    """
    valid = seq_ids >= 0
    tables = block_tables.index_select(0, seq_ids.clamp(min=0).long())  # [T, W]
    k = gather_kv(k_cache, tables).to(q.dtype)  # [T, KVH, L, D]
    v = gather_kv(v_cache, tables).to(q.dtype)
    L = k.shape[-2]
    j = torch.arange(L, device=q.device)[None, :]
    mask = (j <= positions[:, None]) & valid[:, None] | (j == 0) & ~valid[:, None]  # [T, L]
    out = F.scaled_dot_product_attention(q[:, :, None, :], k, v, attn_mask=mask[:, None, None, :], scale=scale,
                                         enable_gqa=True)
    return out[:, :, 0, :]
