"""Torch references of MiniMax's lightning attention (transformers ``MiniMaxLightningAttention``,
modeling_minimax.py): linear attention with a per-head exponential decay, no softmax.

Per head with slope ``s`` (decay ``lam = exp(-s)``) the state is ``S [head_dim, head_dim]`` and

    S_t = lam * S_{t-1} + k_t^T v_t;   o_t = q_t S_t

Prefill computes the same blockwise (HF's algorithm, blocks of ``block_size`` tokens): inside a block the
decay-masked ``(q k^T) v`` (intra), plus the state before the block read through the query decay (inter); the state
after the block is ``S * lam^b + (k * key decay)^T v``. Decode is the recurrence above, one token per row. The two
agree (tests/test_lightning_attention_layer.py ``test_prefill_equals_decode_steps``). Math runs in float32; the
state is float32 (HF keeps it in the value dtype; float32 rounds less over a long generation).

Heads are independent, so a tensor-parallel rank's heads need nothing from other ranks (only the output norm, over
every head, does: runtime/layers/norm.py ``ShardedProjectionRMSNorm``).
"""
from __future__ import annotations

import torch

from ...state_cache import read_state_rows, write_state_rows


def slope_rate(num_heads: int, layer_idx: int, num_layers: int) -> torch.Tensor:
    """Per-head decay rate ``s [num_heads]`` (float32) of layer ``layer_idx``: HF's ``get_slope_rate``, the ALiBi-like
    ``(2 ** (-8 / H)) ** (h + 1)`` scaled down linearly with depth (``1 - i / (L - 1 + 1e-5) + 1e-5``: the first layer
    forgets fastest, the last barely at all), in HF's operation order so float32 values match bit for bit."""
    base = torch.full((num_heads,), 1 / (2 ** (8 / num_heads)), dtype=torch.float32)  # float32 whatever the default
    exponent = torch.arange(num_heads) + 1
    factor = 1 - layer_idx / (num_layers - 1 + 1e-5) + 1e-5
    return (base**exponent) * factor


def split_qkv(qkv: torch.Tensor, num_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``act(qkv_proj(x))`` ``[T, H * 3D]`` (per head ``[q | k | v]``, HF's reshape + split) -> q, k, v ``[T, H, D]``."""
    q, k, v = qkv.view(qkv.shape[0], num_heads, 3 * head_dim).split(head_dim, dim=-1)
    return q, k, v


def lightning_blocks(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: torch.Tensor, slope: torch.Tensor, block_size: int,
    lens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Blockwise lightning attention of R rows of tokens.

    q, k, v ``[R, H, T, D]`` (row r's first ``lens[r]`` tokens real, default all T), state ``[R, H, D, D]`` (before
    the first token), slope ``[H]`` -> (out ``[R, H, T, D]`` float32, garbage past a row's length; new state
    ``[R, H, D, D]`` float32, after each row's last real token). Shape-static: the block loop depends on T only.
    """
    R, H, T, D = q.shape
    q, k, v, S = q.float(), k.float(), v.float(), state.float()
    s = slope.float().view(1, H, 1, 1)
    lens = torch.full((R,), T, dtype=torch.long, device=q.device) if lens is None else lens.to(torch.long)
    outs = []
    for start in range(0, T, block_size):
        b = min(block_size, T - start)
        qb, kb, vb = q[:, :, start:start + b], k[:, :, start:start + b], v[:, :, start:start + b]
        i = torch.arange(b, device=q.device, dtype=torch.float32)
        # real tokens of each row in this block: decays count from the block's last real token
        n = (lens - start).clamp(min=0, max=b).view(R, 1, 1, 1)
        valid = (i.view(1, 1, b, 1) < n).to(torch.float32)
        query_decay = torch.exp(-s * (i.view(1, 1, b, 1) + 1))  # [1, H, b, 1]
        key_decay = torch.exp(-s * (n - 1 - i.view(1, 1, b, 1)).clamp(min=0)) * valid  # [R, H, b, 1]
        gap = i.view(b, 1) - i.view(1, b)
        diagonal = torch.exp(torch.where(gap >= 0, -s * gap, torch.tensor(float("-inf"), device=q.device)))
        intra = torch.matmul(torch.matmul(qb, kb.transpose(-1, -2)) * diagonal, vb)
        inter = torch.matmul(qb * query_decay, S)
        outs.append(inter + intra)
        S = S * torch.exp(-s * n) + torch.matmul((kb * key_decay).transpose(-1, -2), vb)
    return torch.cat(outs, dim=2), S


def lightning_prefill(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: torch.Tensor, slope: torch.Tensor, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence's new tokens: q, k, v ``[T, H, D]``, state ``[H, D, D]`` (zeros when fresh) -> (out ``[T, H, D]``
    float32, new state ``[H, D, D]`` float32)."""
    out, new = lightning_blocks(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                state[None], slope, block_size)
    return out[0].transpose(0, 1), new[0]


def lightning_decode(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, states: torch.Tensor, slope: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row: q, k, v ``[N, H, D]``, states ``[N, H, D, D]`` -> (out ``[N, H, D]``, new states), float32;
    batched, no host reads (a captured decode graph can run it)."""
    lam = torch.exp(-slope.float()).view(1, -1, 1, 1)
    new = lam * states.float() + k.float().unsqueeze(-1) * v.float().unsqueeze(-2)
    return torch.matmul(q.float().unsqueeze(-2), new).squeeze(-2), new


def lightning_static(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slope: torch.Tensor, pool: torch.Tensor, seq_ids: torch.Tensor,
    slots: torch.Tensor, fresh: torch.Tensor, block_size: int, *, decode: bool,
) -> torch.Tensor:
    """Lightning attention of one shape-static bucket (the neuron target: no host reads, no data-dependent shapes).

    q, k, v ``[T, H, D]``; token t belongs to row ``seq_ids[t]`` (-1: padding), rows' tokens packed in order; row r
    continues pool slot ``slots[r]`` (-1: padding row), read as zeros where ``fresh[r]``. ``decode`` (a Python bool:
    one graph per path) means one token per row, token r of row r. Returns ``[T, H, D]`` float32 (zeros on padding)
    and writes each real row's state after its last token into its slot.
    """
    T, H, D = q.shape
    R = slots.shape[0]
    rows = torch.arange(R, device=q.device)
    if decode:
        real = (slots >= 0) & (seq_ids[:R] == rows)
        out, new = lightning_decode(q[:R], k[:R], v[:R], read_state_rows(pool, slots, real & ~fresh), slope)
        write_state_rows(pool, slots, real, new)
        out = out * real.to(out.dtype).view(R, 1, 1)
        return torch.cat([out, out.new_zeros(T - R, H, D)]) if T > R else out
    member = seq_ids.view(1, T) == rows.view(R, 1)  # [R, T]
    lens = member.sum(-1)
    starts = torch.cumsum(lens, 0) - lens
    j = torch.arange(T, device=q.device)
    index = (starts.view(R, 1) + j.view(1, T)).clamp(max=T - 1)
    valid = (j.view(1, T) < lens.view(R, 1)).to(q.dtype).view(R, T, 1, 1)

    def rows_of(x: torch.Tensor) -> torch.Tensor:  # [T, H, D] -> [R, H, T, D], row r's tokens first, zeros after
        return (x[index] * valid).transpose(1, 2)

    real = (slots >= 0) & (lens > 0)
    out, new = lightning_blocks(rows_of(q), rows_of(k), rows_of(v), read_state_rows(pool, slots, real & ~fresh),
                                slope, block_size, lens)
    write_state_rows(pool, slots, real, new)
    # back to the flattened tokens: token t is position t - starts[row] of its row
    row = seq_ids.clamp(min=0).to(torch.long)
    pos = (torch.arange(T, device=q.device) - starts[row]).clamp(min=0, max=T - 1)
    return out[row, :, pos] * (seq_ids >= 0).to(out.dtype).view(T, 1, 1)
