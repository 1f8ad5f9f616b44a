"""Attention over a paged KV cache: torch reference implementations shared by both targets.

Cache layout (vLLM Neuron's HND): ``k_cache, v_cache: [num_blocks, num_kv_heads, block_size, head_dim]``; token slot
``s`` lives in block ``s // block_size`` at offset ``s % block_size``. Slot ``-1`` marks padding: never written.

Softmax runs through ``scaled_dot_product_attention`` (math/flash kernels on CPU/GPU, traceable by dynamo) with
``enable_gqa`` so KV heads are broadcast to their query groups without materialising repeated K/V.

Two per-layer options, shared by every function below (transformers' semantics):
  * ``sliding_window`` W (None = full attention): the query at position q sees key k iff ``q - W < k <= q``
    (``masking_utils.sliding_window_overlay``: ``kv_idx > q_idx - sliding_window``, on top of the causal mask).
    The references only mask (static shapes for traced graphs); keys outside the window still get gathered.
  * ``sinks [heads]`` (GPT-OSS ``self_attn.sinks``): one learned logit per query head that joins the softmax
    denominator and carries no value (HF concatenates it as an extra logit column, softmaxes, drops the column). Here
    it is an extra all-zero key/value column whose additive mask is the sink: ``q . 0 * scale + sink = sink``, and its
    zero value adds nothing to the output, so SDPA computes exactly ``softmax([logits, sink])[:-1] @ V``.
  * ``softcap`` c (Gemma 2 ``attn_logit_softcapping``; None = off): scores ``q.k * scale`` become
    ``c * tanh(scores / c)`` before the mask and softmax. SDPA cannot express that, so a soft-capped call runs
    HF's eager order (``eager_attention_forward``: matmul, scale, cap, mask, float32 softmax cast back, matmul).
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


def check_sliding_window(window: int | None, where: str) -> int | None:
    """A layer's window as its constructor receives it from the config: None (full attention) or a positive int."""
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"{where}: sliding_window must be a positive number of tokens or null, got {window!r}")
    return window


def _window(key_pos: torch.Tensor, query_pos: torch.Tensor, sliding_window: int | None) -> torch.Tensor:
    """Causal (and sliding-window) visibility of keys at ``key_pos`` to queries at ``query_pos`` (broadcast)."""
    visible = key_pos <= query_pos
    if sliding_window is not None:
        visible = visible & (key_pos > query_pos - sliding_window)
    return visible


def check_softcap(softcap: float | None, where: str) -> float | None:
    """A layer's attention-logit soft-cap from the config: None (off) or a positive number."""
    if softcap is not None and (isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or softcap <= 0):
        raise ValueError(f"{where}: attention logit softcap must be a positive number or null, got {softcap!r}")
    return None if softcap is None else float(softcap)


def _softcapped(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, sinks: torch.Tensor | None,
    softcap: float,
) -> torch.Tensor:
    """HF's eager attention with logit soft-capping, in its operation order and dtypes (scores in the input dtype,
    softmax in float32 cast back before the value matmul); KV heads repeated to their query groups."""
    H, KVH = q.shape[-3], k.shape[-3]
    k = k.repeat_interleave(H // KVH, dim=-3)
    v = v.repeat_interleave(H // KVH, dim=-3)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = torch.tanh(scores / softcap) * softcap
    scores = scores.masked_fill(~mask, float("-inf"))
    if sinks is not None:  # the sink logit joins the denominator (GPT-OSS order: after the mask, before softmax)
        sink = sinks.to(scores.dtype).view(H, 1, 1).expand(*scores.shape[:-1], 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1, dtype=torch.float32)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
    return torch.matmul(probs.to(q.dtype), v)


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, sinks: torch.Tensor | None,
    softcap: float | None = None,
) -> torch.Tensor:
    """``q [..., H, Lq, D]``, ``k, v [..., KVH, L, D]``, boolean ``mask`` broadcastable to ``[..., H, Lq, L]``.

    With ``sinks`` the keys get one more all-zero column and the mask turns additive: 0 / -inf for the real keys and
    ``sinks[h]`` on the extra column (see the module docstring); with ``softcap``, HF's eager order."""
    if softcap is not None:
        return _softcapped(q, k, v, mask, scale, sinks, softcap)
    if sinks is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    zero = torch.zeros_like(k[..., :1, :])
    k, v = torch.cat([k, zero], dim=-2), torch.cat([v, zero], dim=-2)
    H, Lq = q.shape[-3], q.shape[-2]
    mask = mask.expand(*mask.shape[:-3], H, Lq, mask.shape[-1])
    bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
    sink = sinks.to(q.dtype).view(H, 1, 1).expand(*mask.shape[:-1], 1)
    bias = torch.cat([bias, sink], dim=-1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale, enable_gqa=True)


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
    sliding_window: int | None = None,
    sinks: torch.Tensor | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """One query token per sequence: ``q [batch, heads, head_dim]`` -> ``[batch, heads, head_dim]``.

    Each query (at position ``context_lens[b] - 1``) attends to the cached positions of its sequence that are
    causally visible and inside its ``sliding_window`` (its own K/V included).
    """
    k = gather_kv(k_cache, block_tables)  # [B, KVH, L, D]
    v = gather_kv(v_cache, block_tables)
    L = k.shape[-2]
    mask = _window(torch.arange(L, device=q.device)[None, :], (context_lens - 1)[:, None], sliding_window)  # [B, L]
    out = _sdpa(q[:, :, None, :], k.to(q.dtype), v.to(q.dtype), mask[:, None, None, :], scale, sinks, softcap)
    return out[:, :, 0, :]


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    context_lens: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    sinks: torch.Tensor | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Varlen causal attention for flattened queries ``q [tokens, heads, head_dim]`` over the paged cache.

    Sequence ``b`` owns query rows ``cu_seqlens_q[b]:cu_seqlens_q[b+1]``, which are its *last* tokens: its context
    holds ``context_lens[b]`` positions (earlier cached ones plus these), so chunked prefill and prefix reuse work
    unchanged. Eager (loops over sequences); the GPU path replaces it with a kernel. With a ``sliding_window`` the
    blocks wholly before every query's window are not gathered.
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
        # A sliding layer reads only from the block holding its first visible key (c - n - W + 1) on: the blocks
        # before it are wholly outside every query's window.
        first = 0 if sliding_window is None else max(0, c - n - sliding_window + 1) // block_size
        k0 = first * block_size
        k = gather_kv(k_cache, block_tables[b, first:nblocks])[:, : c - k0].to(q.dtype)  # [KVH, c - k0, D]
        v = gather_kv(v_cache, block_tables[b, first:nblocks])[:, : c - k0].to(q.dtype)
        qpos = torch.arange(c - n, c, device=q.device)
        mask = _window(torch.arange(k0, c, device=q.device)[None, :], qpos[:, None], sliding_window)  # [n, c - k0]
        o = _sdpa(q[s:e].transpose(0, 1), k, v, mask, scale, sinks, softcap)  # [H, n, D]
        out[s:e] = o.transpose(0, 1)
    return out


def packed_prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_ids: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    sinks: torch.Tensor | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Shape-static causal attention among the tokens of one packed prefill bucket (no cached prefix).

    ``q [T, H, D]``, ``k, v [T, KVH, D]``; token i attends token j when both belong to the same request
    (``seq_ids``, -1 = padding) and ``positions[j] <= positions[i]``. Padding rows attend only to themselves so
    softmax stays finite; their outputs are never sampled.
    """
    T = q.shape[0]
    same = (seq_ids[:, None] == seq_ids[None, :]) & (seq_ids[None, :] >= 0)
    causal = _window(positions[None, :], positions[:, None], sliding_window)
    eye = torch.eye(T, dtype=torch.bool, device=q.device)
    mask = (same & causal) | eye
    out = _sdpa(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], mask[None, None], scale,
                sinks, softcap)
    return out[0].transpose(0, 1)


def paged_segment_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_ids: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    sinks: torch.Tensor | None = None,
    softcap: float | None = None,
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
    mask = _window(j, positions[:, None], sliding_window) & valid[:, None] | (j == 0) & ~valid[:, None]  # [T, L]
    out = _sdpa(q[:, :, None, :], k, v, mask[:, None, None, :], scale, sinks, softcap)
    return out[:, :, 0, :]
