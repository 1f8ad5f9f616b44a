"""Torch references of the Mamba-1 mixer (Gu & Dao 2023, "Mamba"; transformers ``MambaMixer`` / ``JambaMambaMixer``,
their ``causal_conv1d_*`` and ``mamba_selective_scan`` / ``mamba_selective_state_update``).

Per request the layer keeps two states: the last ``K - 1`` conv inputs ``[D, K-1]`` and the SSM state ``h [D, N]``
(``D`` = intermediate channels, ``N`` = ``d_state``). One token ``t`` of the selective scan, per channel d and state n:

    h[d, n] = exp(dt[d] * A[d, n]) * h[d, n] + dt[d] * B[n] * x[d]      # A = -exp(A_log) < 0, dt = softplus(...)
    y[d]    = sum_n C[n] * h[d, n]                                      # the D skip and the gate are added by the layer

Two implementations of the same recurrence, proven equal in ``tests/test_mamba_layer.py``
(``test_chunked_scan_equals_recurrent_steps``):
  * :func:`selective_step`: one token per row (decode, and the oracle);
  * :func:`selective_scan`: chunks of ``chunk_size`` tokens (prefill). Inside a chunk every state is a weighted sum of
    the chunk's inputs and the state before it, the weights ``exp(S_t - S_s)`` (``S`` the running sum of
    ``dt * A``, so every exponent is <= 0: nothing overflows) built at once as a ``[L, L]`` lower-triangular tensor
    per channel and state; only the chunk boundaries are sequential.

The shape-static forms (:func:`conv_static`, :func:`scan_static`) serve the neuron target's buckets and the rocm
layer's decode / speculative-window steps (no host reads): rows are requests, each continuing its state-pool slot.
A padding position gets ``dt = 0`` and ``x = 0``, which leaves a state exactly as it was (``exp(0) * h + 0``).

Precision follows transformers: the conv runs in the weight dtype; ``dt``, ``A``, the state and the scan run in float32
(``A_log``, ``dt_proj.bias`` and ``D`` read as float32); the state is kept in float32.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

# The state pool's row helpers: slot -1 = padding row, shape-static writes that never let a padding row clobber a real
# one.
from ...state_cache import read_state_rows, write_state_rows


# ---------------------------------------------------------------------------------------------------------- conv
def conv_rows(history: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """SiLU of the depthwise causal conv over each row's history: ``history [R, D, K-1+T]`` (the K-1 inputs before the
    new tokens, then the T new ones), ``weight [D, K]`` -> ``[R, D, T]`` (no padding: output t sees inputs t..t+K-1 of
    the history)."""
    out = F.conv1d(history.to(weight.dtype), weight.unsqueeze(1), bias, groups=weight.shape[0])
    return F.silu(out).to(history.dtype)


def conv_prefill(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence's new tokens ``x [T, D]`` after ``state [D, K-1]`` (zeros when fresh) -> (activated conv output
    ``[T, D]``, new state ``[D, K-1]``: the last K-1 inputs, older ones first)."""
    history = torch.cat([state.to(x.dtype), x.t()], dim=-1)  # [D, K-1+T]
    return conv_rows(history.unsqueeze(0), weight, bias)[0].t(), history[:, history.shape[1] - state.shape[1]:]


# ---------------------------------------------------------------------------------------------------------- scan
def discretize_dt(dt: torch.Tensor, dt_bias: torch.Tensor) -> torch.Tensor:
    """``softplus(dt_proj(x) + dt_proj.bias)`` in float32 (transformers adds the bias as float32 inside the scan)."""
    return F.softplus(dt.float() + dt_bias.float())


def selective_step(
    h: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row: state ``h [R, D, N]`` (float32), ``x, dt [R, D]``, ``A [D, N]`` (float32, negative),
    ``B, C [R, N]`` -> (``y [R, D]`` float32, new state ``[R, D, N]``)."""
    dtf = dt.float().unsqueeze(-1)  # [R, D, 1]
    h = torch.exp(dtf * A) * h.float() + dtf * B.float().unsqueeze(1) * x.float().unsqueeze(-1)
    return (h * C.float().unsqueeze(1)).sum(-1), h


def selective_scan(
    h0: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
    chunk_size: int = 16,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The scan over ``T`` tokens of ``R`` rows at once, chunk by chunk: ``h0 [R, D, N]``, ``x, dt [R, T, D]``,
    ``B, C [R, T, N]`` -> (``y [R, T, D]`` float32, final state ``[R, D, N]``). Equal to ``T`` :func:`selective_step`
    calls up to float rounding."""
    if chunk_size < 1:
        raise ValueError(f"selective_scan: chunk_size must be positive, got {chunk_size}")
    R, T, D = x.shape
    h = h0.float()
    ys = []
    for start in range(0, T, chunk_size):
        L = min(chunk_size, T - start)
        dtc = dt[:, start:start + L].float().unsqueeze(-1)  # [R, L, D, 1]
        cum = torch.cumsum(dtc * A, dim=1)  # [R, L, D, N]: S_t, decreasing in t
        seg = cum.unsqueeze(2) - cum.unsqueeze(1)  # [R, L(t), L(s), D, N]: S_t - S_s
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril().view(1, L, L, 1, 1)
        decay = torch.exp(seg.masked_fill(~causal, float("-inf")))  # exp(-inf) = 0 above the diagonal
        inputs = dtc * B[:, start:start + L].float().unsqueeze(2) * x[:, start:start + L].float().unsqueeze(-1)
        states = torch.exp(cum) * h.unsqueeze(1) + torch.einsum("rtsdn,rsdn->rtdn", decay, inputs)  # [R, L, D, N]
        ys.append(torch.einsum("rtdn,rtn->rtd", states, C[:, start:start + L].float()))
        h = states[:, -1]
    y = torch.cat(ys, dim=1) if ys else x.new_zeros(R, 0, D, dtype=torch.float32)
    return y, h


def gated_output(y: torch.Tensor, x: torch.Tensor, D: torch.Tensor, z: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(y + D * x) * silu(z)`` in ``dtype``: the scan output ``y`` (float32) with the ``D`` skip over the conv output
    ``x``, gated by the other half of ``in_proj`` (float32 math, as transformers)."""
    return ((y + x * D.float()) * F.silu(z)).to(dtype)


# -------------------------------------------------------------------------------------------- shape-static forms
def _rows_of_tokens(seq_ids: torch.Tensor, num_rows: int, decode: bool):
    """Where each row's tokens sit in the flattened bucket: (gather index ``[R, n]`` into the tokens, validity
    ``[R, n]``, real tokens per row ``[R]``, first token of each row ``[R]``); ``n`` is 1 when ``decode``, else the
    bucket's token count. Rows' tokens are packed in order; ``seq_ids[t]`` is token t's row (-1: padding)."""
    T = seq_ids.shape[0]
    rows = torch.arange(num_rows, device=seq_ids.device)
    if decode:  # token r is row r's only token
        lens = (seq_ids[:num_rows] == rows).to(torch.long)
        return rows.view(num_rows, 1), lens.view(num_rows, 1) > 0, lens, rows
    lens = (seq_ids.view(1, T) == rows.view(num_rows, 1)).sum(-1)
    starts = torch.cumsum(lens, 0) - lens
    j = torch.arange(T, device=seq_ids.device).view(1, T)
    return (starts.view(num_rows, 1) + j).clamp(max=T - 1), j < lens.view(num_rows, 1), lens, starts


def _to_tokens(out: torch.Tensor, seq_ids: torch.Tensor, starts: torch.Tensor, decode: bool) -> torch.Tensor:
    """Row-major ``out [R, n, D]`` back to the bucket's flattened tokens ``[T, D]`` (zeros on padding tokens)."""
    T, R = seq_ids.shape[0], out.shape[0]
    if decode:
        y = out[:, 0]
        return torch.cat([y, y.new_zeros(T - R, y.shape[-1])]) if T > R else y
    row = seq_ids.clamp(min=0)
    pos = (torch.arange(T, device=out.device) - starts[row]).clamp(min=0, max=out.shape[1] - 1)
    return out[row, pos] * (seq_ids >= 0).to(out.dtype).unsqueeze(-1)


def conv_static(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, pool: torch.Tensor, seq_ids: torch.Tensor,
    slots: torch.Tensor, fresh: torch.Tensor, *, decode: bool,
) -> torch.Tensor:
    """The activated conv of one shape-static bucket: ``x [T, D]`` -> ``[T, D]`` (zeros on padding), writing each real
    row's last K-1 inputs into its slot of ``pool [S, D, K-1]``. Row r continues slot ``slots[r]`` (-1: padding row),
    read as zeros where ``fresh[r]``; ``decode`` (a Python bool: one graph per path) means one token per row."""
    R, K = slots.shape[0], weight.shape[-1]
    gather, valid, lens, starts = _rows_of_tokens(seq_ids, R, decode)
    xr = x[gather] * valid.unsqueeze(-1).to(x.dtype)  # [R, n, D]
    real = (slots >= 0) & (lens > 0)
    history = torch.cat([read_state_rows(pool, slots, real & ~fresh).to(x.dtype), xr.transpose(1, 2)], -1)
    out = conv_rows(history, weight, bias).transpose(1, 2) * real.to(x.dtype).view(R, 1, 1)  # [R, n, D]
    # the new state: the K-1 inputs ending at each row's last real token
    cols = (lens.view(R, 1) + torch.arange(K - 1, device=x.device).view(1, K - 1)).unsqueeze(1)
    write_state_rows(pool, slots, real, history.gather(-1, cols.expand(R, history.shape[1], K - 1)))
    return _to_tokens(out, seq_ids, starts, decode)


def scan_static(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, pool: torch.Tensor,
    seq_ids: torch.Tensor, slots: torch.Tensor, fresh: torch.Tensor, *, decode: bool, chunk_size: int = 16,
) -> torch.Tensor:
    """The selective scan of one shape-static bucket: ``x, dt [T, D]``, ``B, C [T, N]`` -> ``y [T, D]`` float32 (zeros
    on padding), advancing each real row's SSM state in ``pool [S, D, N]`` (rows and slots as :func:`conv_static`).
    Padding positions of a row get ``dt = 0``, so its final state is the state after its last real token."""
    R = slots.shape[0]
    gather, valid, lens, starts = _rows_of_tokens(seq_ids, R, decode)
    real = (slots >= 0) & (lens > 0)
    keep = (valid & real.view(R, 1)).unsqueeze(-1)  # [R, n, 1]
    xr, dtr = (torch.where(keep, t[gather], torch.zeros_like(t[gather])) for t in (x, dt))
    Br, Cr = B[gather], C[gather]
    h0 = read_state_rows(pool, slots, real & ~fresh)
    if decode:
        y, h = selective_step(h0, xr[:, 0], dtr[:, 0], A, Br[:, 0], Cr[:, 0])
        y = y.unsqueeze(1)
    else:
        y, h = selective_scan(h0, xr, dtr, A, Br, Cr, chunk_size)
    write_state_rows(pool, slots, real, h)
    return _to_tokens(y * keep.to(y.dtype), seq_ids, starts, decode)
