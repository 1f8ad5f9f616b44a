"""Torch references of the Mamba-2 mixer (transformers ``Mamba2Mixer`` / ``BambaMixer``, modeling_mamba2.py's
``causal_conv1d_*``, ``mamba2_chunk_scan`` and ``mamba2_selective_state_update``).

    z, xBC, dt = in_proj(h).split([I, I + 2*G*N, H])
    xBC = act(causal depthwise conv1d(xBC) + conv bias)       (conv state: the last K-1 inputs)
    x, B, C = xBC.split([I, G*N, G*N])                         (head h reads group h // (H / G))
    dt = clamp(softplus(dt + dt_bias), *time_step_limit);  A = -exp(A_log)
    S_t = exp(dt_t * A) * S_{t-1} + dt_t * x_t B_t^T;  y_t = S_t C_t + D * x_t     (SSM state S: [H, P, N])
    out = out_proj(rms_norm_per_group(y * silu(z)) * norm.weight)
      (Falcon-H1: optionally rms_norm_per_group(y) * norm.weight * silu(z), or no norm: y * silu(z))

Every function works on rows of a padded batch (row r = one sequence, its tokens first, then padding), so the rocm
layer (one row per prefill segment, or one row per decoding sequence) and the neuron target's shape-static bucket
(``mamba2_static``) run the same code. A padding position carries ``dt = 0`` and ``x = 0``: its decay is
``exp(0) = 1`` and it adds nothing, so the state at the end of a padded row is the state after its last real token.

Prefill is the chunked SSD scan (:func:`ssd_chunked`: within a chunk the quadratic "attention-like" form, across
chunks the state carried in float32), decode the recurrent step (:func:`ssd_step`); tests/test_mamba2_layer.py
``test_chunked_scan_equals_recurrent_steps`` proves the two equal. The scan runs in float32 as transformers' does;
the states keep the pool's dtypes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ...state_cache import read_state_rows, write_state_rows

#: the conv output's activation (``hidden_act``; transformers' Mamba-2 mixers apply it to xBC only)
CONV_ACTIVATIONS = {"silu": F.silu, "swish": F.silu}


def split_projection(zxbcdt: torch.Tensor, intermediate: int, conv_dim: int, num_heads: int):
    """``in_proj`` output ``[..., I + conv_dim + H]`` -> (z ``[..., I]``, xBC ``[..., conv_dim]``, dt ``[..., H]``),
    transformers' split order."""
    if zxbcdt.shape[-1] != intermediate + conv_dim + num_heads:
        raise ValueError(f"Mamba2: in_proj gives {zxbcdt.shape[-1]} features, expected z {intermediate} + xBC "
                         f"{conv_dim} + dt {num_heads}")
    return zxbcdt.split([intermediate, conv_dim, num_heads], dim=-1)


def in_scale_vector(parts: list[int], scales, world: int, what: str) -> torch.Tensor:
    """This rank's ``[sum(parts) / world]`` factors on in_proj's output: part i's rows (each part split evenly across
    ranks) times ``scales[i]`` (transformers' FalconH1 ``compute_mup_vector``: ones times each factor)."""
    if len(scales) != len(parts):
        raise ValueError(f"{what}: in_proj_scales has {len(scales)} factors, expected {len(parts)} (z, x, B, C, dt)")
    return torch.cat([torch.ones(size // world) * float(s) for size, s in zip(parts, scales)])


def causal_conv(
    xbc: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, state: torch.Tensor, lens: torch.Tensor,
    activation: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv of padded rows, continuing each row's conv state.

    xbc ``[R, T, C]`` (row r's first ``lens[r]`` positions real), weight ``[C, K]``, bias ``[C]`` or None, state
    ``[R, C, K-1]`` (the inputs before position 0; zeros for a fresh row) -> (``act(conv + bias)`` ``[R, T, C]``, new
    state ``[R, C, K-1]``: the K-1 inputs ending at each row's last real position; the old state when ``lens`` is 0).
    """
    R, T, C = xbc.shape
    K = weight.shape[-1]
    history = torch.cat([state.to(xbc.dtype), xbc.transpose(1, 2)], dim=-1)  # [R, C, K-1+T]
    windows = history.unfold(-1, K, 1)  # [R, C, T, K]
    out = (windows.to(weight.dtype) * weight.view(1, C, 1, K)).sum(-1)
    if bias is not None:
        out = out + bias.view(1, C, 1)
    cols = (lens.view(R, 1) + torch.arange(K - 1, device=xbc.device).view(1, K - 1)).view(R, 1, K - 1)
    new_state = history.gather(-1, cols.expand(R, C, K - 1))
    return CONV_ACTIVATIONS[activation](out).transpose(1, 2).to(xbc.dtype), new_state


def discretized_dt(dt: torch.Tensor, dt_bias: torch.Tensor, limit: tuple[float, float]) -> torch.Tensor:
    """``clamp(softplus(dt + dt_bias), *limit)`` in float32 (transformers' ``mamba2_chunk_scan``)."""
    dt = F.softplus(dt.float() + dt_bias.float())
    lo, hi = limit
    if lo > 0.0 or hi != float("inf"):
        dt = dt.clamp(min=lo, max=hi)
    return dt


def _heads(t: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``[..., G, N]`` group tensor -> ``[..., H, N]`` (head h reads group h // (H / G))."""
    return t.repeat_interleave(num_heads // t.shape[-2], dim=-2)


def ssd_step(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One recurrent step (decode). x ``[R, H, P]``, dt ``[R, H]`` (discretized), A ``[H]``, B / C ``[R, G, N]``,
    state ``[R, H, P, N]`` -> (y ``[R, H, P]`` float32 without the D skip, new state float32)."""
    H = x.shape[1]
    dt, x = dt.float(), x.float()
    B, C = _heads(B.float(), H), _heads(C.float(), H)
    decay = torch.exp(dt * A.float().view(1, H))  # [R, H]
    new = state.float() * decay[..., None, None] + (dt[..., None] * x)[..., None] * B[:, :, None, :]
    return (new * C[:, :, None, :]).sum(-1), new


def ssd_chunked(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, state: torch.Tensor,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunked SSD scan over padded rows (prefill). x ``[R, T, H, P]``, dt ``[R, T, H]`` (discretized, 0 on
    padding), A ``[H]``, B / C ``[R, T, G, N]``, state ``[R, H, P, N]`` (the state before position 0) -> (y
    ``[R, T, H, P]`` float32 without the D skip, final state ``[R, H, P, N]`` float32).

    Per chunk of ``chunk_size`` positions: with ``a = cumsum(dt * A)``, position t reads
    ``sum_{s<=t} exp(a_t - a_s) (C_t . B_s) dt_s x_s`` from the chunk and ``exp(a_t) C_t . S0`` from the state S0
    entering it; the state leaving it is ``exp(a_L) S0 + sum_s exp(a_L - a_s) dt_s x_s B_s^T``. Equal to
    :func:`ssd_step` applied position after position, in fewer, larger products.
    """
    R, T, H, P = x.shape
    x, dt, A = x.float(), dt.float(), A.float()
    B, C = _heads(B.float(), H), _heads(C.float(), H)
    S = state.float()
    outs = []
    for start in range(0, T, chunk_size):
        end = min(start + chunk_size, T)
        L = end - start
        xc, dtc, Bc, Cc = x[:, start:end], dt[:, start:end], B[:, start:end], C[:, start:end]
        a = torch.cumsum(dtc * A.view(1, 1, H), dim=1)  # [R, L, H]
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        seg = (a[:, :, None, :] - a[:, None, :, :]).masked_fill(~causal.view(1, L, L, 1), float("-inf"))
        scores = torch.einsum("rthn,rshn->rtsh", Cc, Bc) * torch.exp(seg)  # [R, t, s, H]
        xdt = xc * dtc[..., None]  # [R, L, H, P]
        y = torch.einsum("rtsh,rshp->rthp", scores, xdt)
        y = y + torch.einsum("rthn,rhpn->rthp", Cc, S) * torch.exp(a)[..., None]
        tail = torch.exp(a[:, -1:, :] - a)  # [R, L, H]: decay from each position to the chunk's end
        S = S * torch.exp(a[:, -1])[..., None, None] + torch.einsum("rsh,rshp,rshn->rhpn", tail, xdt, Bc)
        outs.append(y)
    return torch.cat(outs, dim=1), S


def gated_rms_norm(y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor | None, group_size: int, eps: float,
                   dtype: torch.dtype, norm_before_gate: bool = False) -> torch.Tensor:
    """transformers' ``MambaRMSNormGated`` with ``norm_before_gate=False``: ``y * silu(z)``, then an RMS norm over
    each group of ``group_size`` channels (in float32), cast to ``dtype`` and scaled by ``weight``.

    ``norm_before_gate`` (``FalconH1RMSNormGated``'s default): the grouped norm of ``y`` scaled by ``weight`` in
    float32, then times ``silu(z)``. ``weight`` None (Falcon-H1 ``mamba_rms_norm`` false): no norm, ``y * silu(z)``.
    """
    gate = F.silu(z.float())
    if weight is None:
        return (y.float() * gate).to(dtype)
    h = y.float() if norm_before_gate else y.float() * gate
    shape = h.shape
    g = h.view(*shape[:-1], shape[-1] // group_size, group_size)
    g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)
    if norm_before_gate:
        return ((weight.float() * g.view(shape)) * gate).to(dtype)
    return weight * g.view(shape).to(dtype)


def mamba2_rows(
    zxbcdt: torch.Tensor, lens: torch.Tensor, conv_state: torch.Tensor, ssm_state: torch.Tensor, p: dict, *,
    decode: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The mixer between ``in_proj`` and ``out_proj`` over padded rows.

    zxbcdt ``[R, T, proj]`` (row r's first ``lens[r]`` positions real), conv_state ``[R, C, K-1]`` and ssm_state
    ``[R, H, P, N]`` (each row's states before position 0) -> (the normed, gated output ``[R, T, I]`` in zxbcdt's
    dtype, new conv states, new SSM states). ``p``: the layer's tensors and sizes (:meth:`Mamba2.params`).
    ``decode`` (T == 1) takes the recurrent step, otherwise the chunked scan.
    """
    R, T, _ = zxbcdt.shape
    H, P, G, N, I = p["num_heads"], p["head_dim"], p["n_groups"], p["state_size"], p["intermediate"]
    z, xbc, dt = split_projection(zxbcdt, I, I + 2 * G * N, H)
    xbc, new_conv = causal_conv(xbc, p["conv_weight"], p["conv_bias"], conv_state, lens, p["activation"])
    valid = (torch.arange(T, device=zxbcdt.device).view(1, T) < lens.view(R, 1))  # [R, T]
    x, B, C = xbc.split([I, G * N, G * N], dim=-1)
    x = x.reshape(R, T, H, P) * valid.view(R, T, 1, 1).to(x.dtype)
    dt = discretized_dt(dt, p["dt_bias"], p["time_step_limit"]) * valid.view(R, T, 1)
    A = -torch.exp(p["A_log"].float())
    if decode:
        y, new_ssm = ssd_step(x[:, 0], dt[:, 0], A, B[:, 0].reshape(R, G, N), C[:, 0].reshape(R, G, N), ssm_state)
        y = y[:, None]
    else:
        y, new_ssm = ssd_chunked(x, dt, A, B.reshape(R, T, G, N), C.reshape(R, T, G, N), ssm_state,
                                 p["chunk_size"])
    y = y + x.float() * p["D"].float().view(1, 1, H, 1)
    out = gated_rms_norm(y.reshape(R, T, H * P), z, p["norm_weight"], p["group_size"], p["eps"], zxbcdt.dtype,
                         p.get("norm_before_gate", False))
    return out, new_conv, new_ssm


def mamba2_static(
    zxbcdt: torch.Tensor, p: dict, conv_pool: torch.Tensor, ssm_pool: torch.Tensor, seq_ids: torch.Tensor,
    slots: torch.Tensor, fresh: torch.Tensor, *, decode: bool,
) -> torch.Tensor:
    """The mixer over one shape-static bucket (the neuron target: no host reads, no data-dependent shapes).

    zxbcdt ``[T, proj]``; token t belongs to row ``seq_ids[t]`` (-1: padding), rows' tokens packed in order; row r
    continues pool slot ``slots[r]`` (-1: padding row), read as zeros where ``fresh[r]``. ``decode`` (a Python bool:
    one graph per path) means one token per row, token r of row r. Returns ``[T, I]`` (zeros on padding tokens) and
    writes each real row's conv and SSM states into its slot; other slots stay bit-for-bit unchanged.
    """
    T = zxbcdt.shape[0]
    R = slots.shape[0]
    rows = torch.arange(R, device=zxbcdt.device)
    if decode:
        lens = (seq_ids[:R] == rows).to(torch.long)
        x = zxbcdt[:R].unsqueeze(1)  # [R, 1, proj]
    else:
        member = seq_ids.view(1, T) == rows.view(R, 1)  # [R, T]
        lens = member.sum(-1)
        starts = torch.cumsum(lens, 0) - lens
        j = torch.arange(T, device=zxbcdt.device)
        x = zxbcdt[(starts.view(R, 1) + j.view(1, T)).clamp(max=T - 1)]  # [R, T, proj], row r's tokens first
    real = (slots >= 0) & (lens > 0)
    keep = real & ~fresh
    out, new_conv, new_ssm = mamba2_rows(x, lens, read_state_rows(conv_pool, slots, keep),
                                         read_state_rows(ssm_pool, slots, keep), p, decode=decode)
    write_state_rows(conv_pool, slots, real, new_conv)
    write_state_rows(ssm_pool, slots, real, new_ssm)
    # Back to the packed token layout: token t is position t - starts[row] of its row.
    if decode:
        y = out[:, 0] * lens.view(R, 1).to(out.dtype)
        return torch.cat([y, y.new_zeros(T - R, y.shape[1])]) if T > R else y
    row = seq_ids.clamp(min=0)
    pos = (torch.arange(T, device=zxbcdt.device) - starts.index_select(0, row)).clamp(min=0)
    y = out[row, pos.clamp(max=out.shape[1] - 1)]
    return y * (seq_ids >= 0).view(T, 1).to(y.dtype)
