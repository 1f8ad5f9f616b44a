"""Shape-static Gated DeltaNet mixer for the neuron target (traceable with ``torch.compile(fullgraph=True)``).

Same function as the eager mixer of ``runtime/layers/gated_deltanet.py`` (conv1d + gated delta rule over each
sequence's state slot), written for the neuron runner's fixed buckets: no host reads, no data-dependent shapes or
branches, so one graph per bucket serves every batch that fits it.

Metadata (the runner's per-layer ``attn_metadata`` entries, see ``NeuronRunner.build_inputs``):
  seq_ids     [T] int   row of each flattened token (-1 = padding token); a row's tokens are contiguous and rows appear
                        in order (how the runner packs a prefill bucket), decode is one token per row
  state_slots [R] int64 state-pool slot of each row (-1 = empty row: its state is neither read nor written)
  state_fresh [R] bool  True when the row has no computed token yet: its state is read as zeros

Prefill scatters the ``T`` flattened tokens into an ``[R, T]`` padded batch (row ``r`` holds its tokens first,
then zeros), so every row runs the chunked rule from its own state in one batched call. Padding positions carry
``g = 0, beta = 0, k = 0``, which leaves a state exactly unchanged (``chunk_scan``'s docstring), and the conv state is
taken at each row's length. Rows with slot -1 write nothing: states are stored with the accumulate trick of
``write_paged_kv_static`` (add ``-old`` then ``new`` on real rows, exact zeros on padding rows).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from ..ops import gated_delta as gd
from .weight_loader import SafetensorsWeightLoader, _read


def _masked(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``x`` where ``keep`` (broadcast from the left), exact zeros elsewhere (garbage and NaN included)."""
    keep = keep.view(*keep.shape, *([1] * (x.dim() - keep.dim())))
    return torch.where(keep, x, torch.zeros_like(x))


def read_state_rows(pool: torch.Tensor, slots: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``pool[slots]`` for rows with ``keep``, zeros for the others (empty rows, fresh sequences)."""
    return _masked(pool.index_select(0, slots.clamp(min=0)), keep)


def write_state_rows(pool: torch.Tensor, slots: torch.Tensor, valid: torch.Tensor, new: torch.Tensor) -> None:
    """``pool[slots[r]] = new[r]`` for rows with ``valid``; other rows leave the pool bit-for-bit unchanged.

    A boolean filter would make shapes data-dependent and ``index_copy_`` is undefined with repeated indices (every
    invalid row points at slot 0), so both writes accumulate: ``-old`` (zeroing real slots exactly), then ``new``; an
    invalid row adds exact zeros. Needs finite pool contents (the pool starts zeroed and only stores finite values).
    """
    idx = slots.clamp(min=0)
    old = pool.index_select(0, idx)
    pool.index_add_(0, idx, _masked(-old, valid))
    pool.index_add_(0, idx, _masked(new.to(pool.dtype), valid))


def gdn_mixer_static(
    mixed: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    conv_weight: torch.Tensor,
    conv_pool: torch.Tensor,
    recurrent_pool: torch.Tensor,
    seq_ids: torch.Tensor,
    state_slots: torch.Tensor,
    state_fresh: torch.Tensor,
    *,
    num_k_heads: int,
    head_k_dim: int,
    head_v_dim: int,
    decode: bool,
    chunk_size: int = 64,
) -> torch.Tensor:
    """Conv + gated delta rule of one bucket; returns the core output ``[T, Hv, Dv]`` (zeros on padding tokens)
    and advances the states of the real rows in ``conv_pool [S, C, K-1]`` / ``recurrent_pool [S, Hv, Dk, Dv]``.

    ``mixed [T, C]`` is the conv input ``[q, k, v]`` and ``g, beta [T, Hv]`` the gates (``gd.split_projections``,
    ``gd.gdn_gating``); ``conv_weight [C, K]``. ``decode`` (a Python bool: one graph per path) means one token per row
    (``T == R``).
    """
    T, C = mixed.shape
    R = state_slots.shape[0]
    num_v_heads = g.shape[-1]
    heads = (num_k_heads, num_v_heads, head_k_dim, head_v_dim)
    rows = torch.arange(R, device=mixed.device)
    if decode:
        lens = (seq_ids == rows).to(torch.long)  # [R]: 1 for a real row, 0 for padding
        valid_tok = (lens > 0).view(R, 1)  # [R, 1]
        x, gp, bp = mixed.view(R, 1, C), g.view(R, 1, -1), beta.view(R, 1, -1)
    else:
        member = seq_ids.view(1, T) == rows.view(R, 1)  # [R, T]
        lens = member.sum(-1)
        starts = torch.cumsum(lens, 0) - lens  # rows are packed in order
        j = torch.arange(T, device=mixed.device)
        valid_tok = j.view(1, T) < lens.view(R, 1)  # [R, T]
        gather = (starts.view(R, 1) + j.view(1, T)).clamp(max=T - 1)
        x, gp, bp = (_masked(t[gather], valid_tok) for t in (mixed, g, beta))  # [R, T, ...]
    real = (state_slots >= 0) & (lens > 0)
    keep = real & ~state_fresh
    conv0 = read_state_rows(conv_pool, state_slots, keep)
    rec0 = read_state_rows(recurrent_pool, state_slots, keep)

    out, conv1 = gd.causal_conv1d(x, conv_weight, conv0, lengths=lens)
    q, k, v = (_masked(t, valid_tok) for t in gd.split_conv_output(out, *heads))
    if decode:
        o, rec1 = gd.recurrent_gated_delta_rule(q, k, v, gp, bp, rec0)
    else:
        qf, kf, vf, gf, bf = gd.prepare_inputs(q, k, v, gp, bp, use_qk_l2norm=True, scale=None)
        o, rec1 = gd.chunk_scan(qf, kf, vf, gf, bf, rec0, chunk_size, solve="substitution")
        o = o.transpose(1, 2).to(q.dtype)  # [R, T, Hv, Dv]
    write_state_rows(conv_pool, state_slots, real, conv1)
    write_state_rows(recurrent_pool, state_slots, real, rec1)

    if decode:
        return _masked(o[:, 0], valid_tok.view(R))
    # back to the flattened tokens: token t is position t - starts[row] of its row
    row = seq_ids.clamp(min=0)
    pos = (torch.arange(T, device=mixed.device) - starts[row]).clamp(min=0, max=T - 1)
    return _masked(o.reshape(R * T, num_v_heads, head_v_dim)[row * T + pos], seq_ids >= 0)


def head_parts_weight_loader(
    parts: Sequence[Sequence[int]], num_shards: int, is_storage_transposed: bool = False
) -> SafetensorsWeightLoader:
    """Closure loader for Gated DeltaNet tensors sharded by heads in parts (the neuron twin of the rocm layer's
    ``HeadPartsParallelLinear`` / ``DepthwiseConv1dWeight`` / head-vector loaders).

    ``parts[i]`` lists the row blocks of checkpoint tensor ``i`` (dim 0, HF ``[out, ...]``), each split evenly across
    ranks; the rank's rows of every block of every tensor are concatenated in order. Examples:
      Qwen3.5 ``in_proj_qkvz`` from ``(in_proj_qkv, in_proj_z)``: ``[[Hk*Dk, Hk*Dk, Hv*Dv], [Hv*Dv]]``;
      Qwen3-Next ``in_proj_qkvz`` (interleaved per key head): ``[[total_rows]]``; ``conv1d.weight [C, 1, K]``:
      ``[[Hk*Dk, Hk*Dk, Hv*Dv]]``; ``A_log``: ``[[Hv]]``.
    2-D results are returned ``[in, out]`` when ``is_storage_transposed``.
    """

    def transform(slices: Sequence[Any], rank: int) -> torch.Tensor:
        if len(slices) != len(parts):
            raise ValueError(f"head-sharded loader needs {len(parts)} checkpoint tensor(s), got {len(slices)}")
        pieces = []
        for i, (s, blocks) in enumerate(zip(slices, parts)):
            rows = s.get_shape()[0]
            if rows != sum(blocks):
                raise ValueError(f"checkpoint tensor {i} has {rows} rows, expected {sum(blocks)} ({list(blocks)})")
            start = 0
            for size in blocks:
                if size % num_shards:
                    raise ValueError(f"block of {size} rows is not divisible by the tensor-parallel size {num_shards}")
                local = size // num_shards
                pieces.append(_read(s, 0, start + rank * local, local))
                start += size
        t = torch.cat(pieces, dim=0)
        return t.t() if is_storage_transposed and t.dim() == 2 else t

    return SafetensorsWeightLoader(transform)
