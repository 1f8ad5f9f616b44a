"""Torch references of LFM2's short convolution (transformers ``Lfm2ShortConv``, ``causal_conv1d_fn`` /
``causal_conv1d_update`` of modeling_lfm2.py).

    B, C, x = in_proj(h).chunk(3);  y = C * causal_depthwise_conv(B * x);  out = out_proj(y)

The conv over a sequence continues the request's state: the ``K - 1`` inputs (``B * x``) before the first new token,
zeros for a fresh request. Prefill convolves ``[state | inputs]`` with no padding and keeps its last ``K - 1``
columns as the new state; decode is the same computation for one token (one window ``[state | x_t]``), so the two
agree (tests/test_short_conv_layer.py ``test_decode_op_equals_prefill_op``).
Channels are independent (a depthwise conv), so a rank's slice of channels needs nothing from other ranks.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

# The state pool's row helpers: slot -1 = padding row, shape-static writes that never let a padding row clobber a real one.
from ...state_cache import read_state_rows, write_state_rows


def gated_input(bcx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``in_proj`` output ``[T, 3D]`` (``[B | C | x]``, HF's ``chunk(3)``) -> (conv input ``B * x``, output gate
    ``C``)."""
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
    batched over rows with no host reads (so a captured decode graph can run it).
    """
    window = torch.cat([states.to(bx.dtype), bx.unsqueeze(-1)], dim=-1)  # [N, D, K]
    out = (window.to(weight.dtype) * weight).sum(-1)
    if bias is not None:
        out = out + bias
    return out.to(bx.dtype), window[:, :, 1:]


def short_conv_static(
    bx: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, pool: torch.Tensor, seq_ids: torch.Tensor,
    slots: torch.Tensor, fresh: torch.Tensor, *, decode: bool,
) -> torch.Tensor:
    """The conv of one shape-static bucket (the neuron target: no host reads, no data-dependent shapes).

    bx ``[T, D]``; token t belongs to row ``seq_ids[t]`` (-1: padding), rows' tokens packed in order; row r continues
    pool slot ``slots[r]`` (-1: padding row), read as zeros where ``fresh[r]``. ``decode`` (a Python bool: one graph
    per path) means one token per row, token r of row r. Returns ``[T, D]`` (zeros on padding) and writes each real
    row's last K-1 inputs into its slot.
    """
    T, D = bx.shape
    R, K = slots.shape[0], weight.shape[-1]
    rows = torch.arange(R, device=bx.device)
    if decode:
        lens = (seq_ids[:R] == rows).to(torch.long)  # [R]: 1 for a real row, 0 for padding
        x = bx[:R].unsqueeze(1) * lens.view(R, 1, 1).to(bx.dtype)  # [R, 1, D]
        starts = rows
    else:
        member = seq_ids.view(1, T) == rows.view(R, 1)  # [R, T]
        lens = member.sum(-1)
        starts = torch.cumsum(lens, 0) - lens
        j = torch.arange(T, device=bx.device)
        valid = (j.view(1, T) < lens.view(R, 1)).to(bx.dtype).unsqueeze(-1)
        x = bx[(starts.view(R, 1) + j.view(1, T)).clamp(max=T - 1)] * valid  # [R, T, D], row r's tokens first
    real = (slots >= 0) & (lens > 0)
    history = torch.cat([read_state_rows(pool, slots, real & ~fresh).to(bx.dtype), x.transpose(1, 2)], -1)
    out = (history.unfold(-1, K, 1).to(weight.dtype) * weight.view(1, D, 1, K)).sum(-1)  # [R, D, n]
    if bias is not None:
        out = out + bias.view(1, D, 1)
    # The new state: the K-1 inputs ending at each row's last real token.
    cols = (lens.view(R, 1) + torch.arange(K - 1, device=bx.device).view(1, K - 1)).view(R, 1, K - 1)
    new = history.gather(-1, cols.expand(R, D, K - 1))
    write_state_rows(pool, slots, real, new)
    out = out.to(bx.dtype) * real.to(bx.dtype).view(R, 1, 1)
    if decode:
        y = out[:, :, 0]
        return torch.cat([y, y.new_zeros(T - R, D)]) if T > R else y
    # back to the flattened tokens: token t is position t - starts[row] of its row
    row = seq_ids.clamp(min=0)
    pos = (torch.arange(T, device=bx.device) - starts[row]).clamp(min=0, max=out.shape[-1] - 1)
    return out[row, :, pos] * (seq_ids >= 0).to(bx.dtype).unsqueeze(-1)
