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
  * ``chunk`` C (Llama 4 ``attention_chunk_size`` on its RoPE layers; None = off): the query at position q sees key k
    iff ``k // C == q // C`` (``masking_utils.chunked_overlay``, on top of the causal mask) -- a window whose left
    edge is the start of the query's chunk. Like windows, masked only; prefill skips the blocks before every query's
    chunk.
  * ``alibi`` (:class:`Alibi`; Falcon / BLOOM ALiBi; None = off): ``scale * slopes[h] * k`` is added to the scaled
    scores of key position k (HF's form: the per-query ``- slopes[h] * q`` of the textbook bias is a constant of the
    softmax row), before the mask.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F


class Alibi(NamedTuple):
    """A layer's ALiBi position bias: ``scale * (slopes[h] * k)`` on the scores of head h for the key at position k.

    ``slopes [heads]``: this rank's heads' slopes (:func:`alibi_slopes` sliced by tensor-parallel rank); the product
    ``slopes[h] * k`` is formed in bfloat16 when ``bf16`` (HF Falcon's ``build_alibi_tensor`` rounds the slopes and the
    product to bfloat16: the checkpoints were trained so), else in float32 (BLOOM); ``scale`` multiplies it after
    (Falcon: ``1 / sqrt(head_dim)``, its bias joins the mask that SDPA adds to the scaled scores)."""

    slopes: torch.Tensor
    scale: float
    bf16: bool = False

    def bias(self, key_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``key_pos [L]`` (integer positions) -> ``[heads, 1, L]`` additive bias in ``dtype``."""
        slopes = self.slopes.to(torch.bfloat16 if self.bf16 else torch.float32)
        return ((slopes[:, None] * key_pos[None, :]).to(dtype) * self.scale)[:, None, :]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi slopes of ``num_heads`` heads (Press et al.; HF ``build_alibi_tensor``), float32 ``[num_heads]``.

    With n the largest power of two <= heads: ``2 ** (-8 i / n)`` for i = 1..n, then, for the heads past n, the odd
    powers ``2 ** (-4 j / n)``, j = 1, 3, 5, ... (the slopes of 2n heads that the first n did not take)."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"alibi: num_attention_heads must be a positive int, got {num_heads!r}")
    n = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(n) - 3))), dtype=torch.float32)
    slopes = torch.pow(base, torch.arange(1, 1 + n, dtype=torch.int32))
    if n != num_heads:
        extra = torch.tensor(2 ** (-(2 ** -(math.log2(2 * n) - 3))), dtype=torch.float32)
        rest = min(n, num_heads - n)
        slopes = torch.cat([slopes, torch.pow(extra, torch.arange(1, 1 + 2 * rest, 2, dtype=torch.int32))])
    return slopes


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


def check_chunk(chunk: int | None, where: str) -> int | None:
    """A layer's attention chunk from the config: None (no chunking) or a positive int (Llama 4
    ``attention_chunk_size``)."""
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise ValueError(f"{where}: attention_chunk_size must be a positive number of tokens or null, got {chunk!r}")
    return chunk


def _window(
    key_pos: torch.Tensor, query_pos: torch.Tensor, sliding_window: int | None, chunk: int | None = None
) -> torch.Tensor:
    """Causal (sliding-window, chunked) visibility of keys at ``key_pos`` to queries at ``query_pos`` (broadcast)."""
    visible = key_pos <= query_pos
    if sliding_window is not None:
        visible = visible & (key_pos > query_pos - sliding_window)
    if chunk is not None:  # the query's chunk only: k >= q - q % C (k <= q already)
        visible = visible & (key_pos >= query_pos - query_pos % chunk)
    return visible


def _first_key(first_query: int, sliding_window: int | None, chunk: int | None) -> int:
    """The lowest key position any query at ``first_query`` or later can see (0 without a window or chunk)."""
    lo = 0
    if sliding_window is not None:
        lo = max(lo, first_query - sliding_window + 1)
    if chunk is not None:
        lo = max(lo, first_query - first_query % chunk)
    return lo


def check_softcap(softcap: float | None, where: str) -> float | None:
    """A layer's attention-logit soft-cap from the config: None (off) or a positive number."""
    if softcap is not None and (isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or softcap <= 0):
        raise ValueError(f"{where}: attention logit softcap must be a positive number or null, got {softcap!r}")
    return None if softcap is None else float(softcap)


def _softcapped(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, sinks: torch.Tensor | None,
    softcap: float, bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """HF's eager attention with logit soft-capping, in its operation order and dtypes (scores in the input dtype,
    softmax in float32 cast back before the value matmul); KV heads repeated to their query groups; ``bias`` (ALiBi)
    joins after the cap, with the mask."""
    H, KVH = q.shape[-3], k.shape[-3]
    k = k.repeat_interleave(H // KVH, dim=-3)
    v = v.repeat_interleave(H // KVH, dim=-3)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = torch.tanh(scores / softcap) * softcap
    if bias is not None:
        scores = scores + bias
    scores = scores.masked_fill(~mask, float("-inf"))
    if sinks is not None:  # the sink logit joins the denominator (GPT-OSS order: after the mask, before softmax)
        sink = sinks.to(scores.dtype).view(H, 1, 1).expand(*scores.shape[:-1], 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1, dtype=torch.float32)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
    return torch.matmul(probs.to(q.dtype), v)


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, sinks: torch.Tensor | None,
    softcap: float | None = None, bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``q [..., H, Lq, D]``, ``k, v [..., KVH, L, D]``, boolean ``mask`` broadcastable to ``[..., H, Lq, L]``;
    ``bias`` (ALiBi, or None) an additive float bias broadcastable to the same shape.

    With ``sinks`` the keys get one more all-zero column and the mask turns additive: 0 / -inf for the real keys and
    ``sinks[h]`` on the extra column (see the module docstring); with ``softcap``, HF's eager order."""
    if softcap is not None:
        return _softcapped(q, k, v, mask, scale, sinks, softcap, bias)
    if sinks is None:
        if bias is not None:
            mask = torch.where(mask, bias.to(q.dtype), float("-inf"))  # no host tensor: graph-capturable
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    zero = torch.zeros_like(k[..., :1, :])
    k, v = torch.cat([k, zero], dim=-2), torch.cat([v, zero], dim=-2)
    H, Lq = q.shape[-3], q.shape[-2]
    mask = mask.expand(*mask.shape[:-3], H, Lq, mask.shape[-1])
    if bias is None:
        add = torch.zeros(mask.shape, dtype=q.dtype, device=q.device)
    else:
        add = bias.to(q.dtype).expand(mask.shape)
    add = add.masked_fill(~mask, float("-inf"))
    sink = sinks.to(q.dtype).view(H, 1, 1).expand(*mask.shape[:-1], 1)
    add = torch.cat([add, sink], dim=-1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=add, scale=scale, enable_gqa=True)


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
    chunk: int | None = None,
    alibi: Alibi | None = None,
) -> torch.Tensor:
    """One query token per sequence: ``q [batch, heads, head_dim]`` -> ``[batch, heads, head_dim]``.

    Each query (at position ``context_lens[b] - 1``) attends to the cached positions of its sequence that are
    causally visible and inside its ``sliding_window`` / ``chunk`` (its own K/V included).
    """
    k = gather_kv(k_cache, block_tables)  # [B, KVH, L, D]
    v = gather_kv(v_cache, block_tables)
    L = k.shape[-2]
    key_pos = torch.arange(L, device=q.device)
    mask = _window(key_pos[None, :], (context_lens - 1)[:, None], sliding_window, chunk)  # [B, L]
    bias = None if alibi is None else alibi.bias(key_pos, q.dtype)[None]  # [1, H, 1, L]
    out = _sdpa(q[:, :, None, :], k.to(q.dtype), v.to(q.dtype), mask[:, None, None, :], scale, sinks, softcap, bias)
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
    chunk: int | None = None,
    alibi: Alibi | None = None,
) -> torch.Tensor:
    """Varlen causal attention for flattened queries ``q [tokens, heads, head_dim]`` over the paged cache.

    Sequence ``b`` owns query rows ``cu_seqlens_q[b]:cu_seqlens_q[b+1]``, which are its *last* tokens: its context
    holds ``context_lens[b]`` positions (earlier cached ones plus these), so chunked prefill and prefix reuse work
    unchanged. Eager (loops over sequences); the GPU path replaces it with a kernel. With a ``sliding_window`` or a
    ``chunk`` the blocks wholly before every query's visible keys are not gathered.
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
        # A sliding / chunked layer reads only from the block holding the first key its first query sees: the
        # blocks before it are outside every query's window (or chunk).
        first = _first_key(c - n, sliding_window, chunk) // block_size
        k0 = first * block_size
        k = gather_kv(k_cache, block_tables[b, first:nblocks])[:, : c - k0].to(q.dtype)  # [KVH, c - k0, D]
        v = gather_kv(v_cache, block_tables[b, first:nblocks])[:, : c - k0].to(q.dtype)
        qpos = torch.arange(c - n, c, device=q.device)
        key_pos = torch.arange(k0, c, device=q.device)
        mask = _window(key_pos[None, :], qpos[:, None], sliding_window, chunk)  # [n, c - k0]
        bias = None if alibi is None else alibi.bias(key_pos, q.dtype)  # [H, 1, c - k0]
        o = _sdpa(q[s:e].transpose(0, 1), k, v, mask, scale, sinks, softcap, bias)  # [H, n, D]
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
    chunk: int | None = None,
    alibi: Alibi | None = None,
) -> torch.Tensor:
    """Shape-static causal attention among the tokens of one packed prefill bucket (no cached prefix).

    ``q [T, H, D]``, ``k, v [T, KVH, D]``; token i attends token j when both belong to the same request
    (``seq_ids``, -1 = padding) and ``positions[j] <= positions[i]`` (inside the window / chunk). Padding rows attend
    only to themselves so softmax stays finite; their outputs are never sampled.
    """
    T = q.shape[0]
    same = (seq_ids[:, None] == seq_ids[None, :]) & (seq_ids[None, :] >= 0)
    causal = _window(positions[None, :], positions[:, None], sliding_window, chunk)
    eye = torch.eye(T, dtype=torch.bool, device=q.device)
    mask = (same & causal) | eye
    bias = None if alibi is None else alibi.bias(positions, q.dtype)[None]  # [1, H, 1, T]
    out = _sdpa(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], mask[None, None], scale,
                sinks, softcap, bias)
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
    chunk: int | None = None,
    alibi: Alibi | None = None,
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
    key_pos = torch.arange(L, device=q.device)
    j = key_pos[None, :]
    mask = _window(j, positions[:, None], sliding_window, chunk) & valid[:, None] | (j == 0) & ~valid[:, None]
    bias = None if alibi is None else alibi.bias(key_pos, q.dtype)[None]  # [1, H, 1, L]
    out = _sdpa(q[:, :, None, :], k, v, mask[:, None, None, :], scale, sinks, softcap, bias)
    return out[:, :, 0, :]
