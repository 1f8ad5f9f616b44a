"""Torch references of LFM2's short convolution (transformers ``Lfm2ShortConv``, ``causal_conv1d_fn`` /
``causal_conv1d_update`` of modeling_lfm2.py).

    B, C, x = in_proj(h).chunk(3);  y = C * causal_depthwise_conv(B * x);  out = out_proj(y)

The conv over a sequence continues the request's state: the ``K - 1`` inputs (``B * x``) before the first new token,
zeros for a fresh request. Prefill convolves ``[state | inputs]`` with no padding and keeps its last ``K - 1``
columns as the new state; decode is the same computation for one token (one window ``[state | x_t]``), so the two
agree exactly (tests/test_short_conv_ops.py proves it).
Channels are independent (a depthwise conv), so a rank's slice of channels needs nothing from other ranks.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def gated_input(bcx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``in_proj`` output ``[T, 3D]`` (``[B | C | x]``, HF's ``chunk(3)``) -> (conv input ``B * x``, output gate ``C``)."""
    b, c, x = bcx.chunk(3, dim=-1)
    return b * x, c


def conv_prefill(
    bx: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal depthwise conv of one sequence's new tokens.

    bx ``[T, D]`` conv inputs, weight ``[D, K]``, bias ``[D]`` or None, state ``[D, K-1]`` (the inputs before these
    tokens, zeros when fresh) -> (out ``[T, D]``, new state ``[D, K-1]``: the last K-1 inputs, older ones first).
    """
    history = torch.cat([state.to(bx.dtype), bx.t()], dim=-1)  # [D, K-1+T]
    out = F.conv1d(history.unsqueeze(0).to(weight.dtype), weight.unsqueeze(1), bias, groups=weight.shape[0])
    return out[0].t().to(bx.dtype), history[:, history.shape[1] - state.shape[1]:]


def conv_decode(
    bx: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, states: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row: bx ``[N, D]``, states ``[N, D, K-1]`` -> (out ``[N, D]``, new states ``[N, D, K-1]``).

    The window ``[state | x_t]`` times the kernel, summed over taps: what ``conv_prefill`` computes for T = 1,
    batched over rows with no host reads (so the neuron bucket and a captured decode graph can run it).
    """
    window = torch.cat([states.to(bx.dtype), bx.unsqueeze(-1)], dim=-1)  # [N, D, K]
    out = (window.to(weight.dtype) * weight).sum(-1)
    if bias is not None:
        out = out + bias
    return out.to(bx.dtype), window[:, :, 1:]


def read_states(pool: torch.Tensor, slots: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Rows ``slots`` of the pool ``[num_slots, D, K-1]``; zeros where ``keep`` is False (a fresh request must not
    see the slot's previous owner). Padding rows (slot -1) read slot 0 masked to zeros, never written back."""
    rows = pool.index_select(0, slots.clamp(min=0))
    return rows * (keep & (slots >= 0)).to(rows.dtype).view(-1, 1, 1)


def short_conv_static(
    bx: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, pool: torch.Tensor, seq_ids: torch.Tensor,
    slots: torch.Tensor, fresh: torch.Tensor, *, decode: bool,
) -> torch.Tensor:
    """The conv of a shape-static batch (the neuron buckets): token t belongs to sequence ``seq_ids[t]`` (-1:
    padding), sequence s to pool slot ``slots[s]`` (-1: padding). Decode: one token per sequence, token i of
    sequence i. Prefill: each sequence's tokens in order, the whole prompt in this step. Writes each real
    sequence's new state into its slot; padding tokens give zeros."""
    states = read_states(pool, slots, ~fresh)
    real = slots >= 0
    if decode:
        n = slots.shape[0]
        out, new = conv_decode(bx[:n], weight, bias, states)
        out = out * real.to(out.dtype).unsqueeze(-1)
        if bx.shape[0] > n:
            out = torch.cat([out, out.new_zeros(bx.shape[0] - n, out.shape[1])])
    else:
        out = bx.new_zeros(bx.shape)
        new = states.clone()
        for s in range(slots.shape[0]):  # static loop over bucket rows; the token mask keeps shapes fixed
            mask = (seq_ids == s).to(bx.dtype).unsqueeze(-1)
            o, st = _masked_prefill(bx * mask, mask, weight, bias, states[s])
            out = out + o * mask
            new[s] = st
    idx = slots.clamp(min=0)
    # Padding sequences write their slot-0 row back unchanged.
    pool.index_copy_(0, idx, torch.where(real.view(-1, 1, 1), new.to(pool.dtype), pool.index_select(0, idx)))
    return out


def _masked_prefill(bx, mask, weight, bias, state):
    """``conv_prefill`` of the tokens where ``mask`` is 1 (contiguous, in order) within a fixed-length row: the
    tokens are gathered to the front by a stable sort, so the state ends at the sequence's last real token."""
    order = torch.argsort(1 - mask[:, 0], stable=True)
    n = mask.sum().to(torch.long)
    packed = bx.index_select(0, order)
    out_packed, _ = conv_prefill(packed, weight, bias, state)
    history = torch.cat([state.to(bx.dtype), packed.t()], dim=-1)  # [D, K-1+T]
    k1 = state.shape[1]
    cols = n + torch.arange(k1, device=bx.device)  # the K-1 columns ending at the last real token
    new_state = history.index_select(1, cols)
    out = torch.zeros_like(bx).index_copy(0, order, out_packed)
    return out, new_state
