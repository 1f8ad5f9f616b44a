"""Gated DeltaNet ops (Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks"), plain torch, CPU-friendly.

The layer of Qwen3-Next / Qwen3.5 keeps, per request, a recurrent state ``S [num_v_heads, k_dim, v_dim]`` and the
last ``K - 1`` inputs of a depthwise causal conv1d. One token ``t`` of the gated delta rule (per value head):

    S   = exp(g_t) * S                       # gated decay, g_t <= 0
    S  += k_t (beta_t * (v_t - S^T k_t))^T   # delta-rule write: only the part S does not already predict
    o_t = S^T q_t                            # q, k L2-normalised, q scaled by k_dim ** -0.5

Two implementations of the same function, proven equal in ``tests/test_gated_delta_ops.py``:
  * :func:`recurrent_gated_delta_rule`: token by token (decode, and the oracle);
  * :func:`chunk_gated_delta_rule`: chunks of ``chunk_size`` tokens (prefill). Inside a chunk the ``C`` delta-rule
    updates collapse into one unit-lower-triangular solve (the UT/WY form of DeltaNet, Yang et al. 2024), so the
    sequential part is one small matmul chain per chunk instead of per token. Same algorithm as transformers'
    ``torch_chunk_gated_delta_rule`` and flash-linear-attention's ``chunk_gated_delta_rule``; code written here.

Conventions follow flash-linear-attention (fla): tensors are ``[batch, seq, heads, dim]``; with ``cu_seqlens`` the batch
is 1 and ``seq`` is the concatenation of variable-length sequences, ``initial_state`` then has one row per sequence.
Value heads are grouped over key heads: key head ``h`` serves value heads ``h * r .. h * r + r - 1`` with
``r = num_v_heads // num_k_heads`` (``repeat_interleave``, as transformers).

GPU dispatch: on a CUDA tensor (``runtime/ops/gpu.enabled``) :func:`gdn_gating`, :func:`gated_rms_norm` and the decode
path of :func:`gdn_mixer_static` run the Triton kernels of ``runtime/layers/gated_deltanet/kernels.py`` (sync-free,
capturable in CUDA graphs). With ``MODELGEN_GDN_PREFILL=fla`` :func:`chunk_gated_delta_rule` runs
flash-linear-attention's chunked kernel (optional: ``pip install 'modelgen[fla]'``); it is off by default because on a
random bf16 Qwen3-Next (4 layers, real shape, H200) fla's prefill moved the last logits by up to 0.47 (max |logit| 4.2)
from the float32 torch chunked rule, against 0.03 between transformers' and modelgen's torch paths (transformers bound
to fla: the same 0.48), so the torch chunked rule (float32 state) stays the GPU prefill. The ``*_ref`` functions are the
torch references the GPU tests compare against; every other caller goes through the dispatching names.
``MODELGEN_BACKEND=torch`` keeps the references everywhere.

Precision (as transformers 5.24 ``modeling_qwen3_next.py`` and fla): the delta rule runs in float32 whatever the input
dtype (L2 norm included) and returns its output in the input dtype and its state in float32; the gate ``g`` is computed
in float32 from ``A_log`` (``-exp(A_log)`` overflows to ``-inf`` in fp16 otherwise); the conv runs in the weight dtype.
"""
from __future__ import annotations


import torch
import torch.nn.functional as F

from modelgen import settings

from ...state_cache import read_state_rows, write_state_rows  # the pool's row access, shared by every state kind

L2NORM_EPS = 1e-6  # transformers' l2norm default, aligned with fla's kernel


def _triton(x: torch.Tensor) -> bool:
    from ...ops import gpu

    return gpu.enabled(x)


# ---------------------------------------------------------------------------------------------------- small pieces
def l2norm(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + eps)`` over the last dim (transformers' ``l2norm``, eps inside the root as fla)."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def gdn_gating(
    A_log: torch.Tensor, a: torch.Tensor, dt_bias: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`gdn_gating_ref`, one Triton launch on a GPU (``a, b [T, Hv]``)."""
    if a.dim() == 2 and _triton(a):
        from . import kernels as ggd

        return ggd.gdn_gating(A_log, a, dt_bias, b)
    return gdn_gating_ref(A_log, a, dt_bias, b)


def gdn_gating_ref(
    A_log: torch.Tensor, a: torch.Tensor, dt_bias: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``g = -exp(A_log) * softplus(a + dt_bias)`` (float32 log-decay, <= 0) and ``beta = sigmoid(b)`` (input dtype).

    Exactly the expressions of ``Qwen3NextGatedDeltaNet.forward``: ``A_log`` is upcast before ``exp`` and ``a`` before
    adding ``dt_bias``; ``beta`` stays in the projection dtype (the delta rule upcasts it).
    """
    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias)
    return g, b.sigmoid()


def expand_kv_heads(x: torch.Tensor, num_v_heads: int, dim: int = -2) -> torch.Tensor:
    """Key-head tensor -> one copy per value head (``repeat_interleave``: key head h serves value heads h*r..h*r+r-1)."""
    num_k_heads = x.shape[dim]
    if num_v_heads == num_k_heads:
        return x
    if num_v_heads % num_k_heads:
        raise ValueError(f"gated delta rule: num_v_heads ({num_v_heads}) is not a multiple of num_k_heads ({num_k_heads})")
    return x.repeat_interleave(num_v_heads // num_k_heads, dim=dim)


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """:func:`gated_rms_norm_ref`, one Triton launch on a GPU."""
    if _triton(x):
        from . import kernels as ggd

        return ggd.gated_rms_norm(x, z, weight, eps)
    return gated_rms_norm_ref(x, z, weight, eps)


def gated_rms_norm_ref(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``rmsnorm(x) * weight * silu(z)`` over the last dim: transformers 5.24 ``Qwen3NextRMSNormGated`` (identical
    ``Qwen3_5RMSNormGated``).

    Not zero-centred: the weight is initialised to ones and multiplied as stored (unlike the models' plain
    ``Qwen3NextRMSNorm``, which computes ``(1 + w) * x_hat``). Order of casts as HF: normalise in float32, cast back to
    the input dtype *before* the weight, then multiply by ``silu(z)`` computed in float32, cast to the input dtype.
    """
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    h = weight * h.to(dtype)
    h = h * F.silu(z.float())
    return h.to(dtype)


def split_projections(
    qkvz: torch.Tensor, ba: torch.Tensor, layout: str, num_k_heads: int, num_v_heads: int, head_k_dim: int,
    head_v_dim: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused projections ``qkvz [T, *]``, ``ba [T, 2 * Hv]`` (one rank's heads) -> conv input ``[T, 2*Hk*Dk + Hv*Dv]``
    ordered ``[q, k, v]`` as HF's ``conv1d`` channels, ``z [T, Hv, Dv]``, ``b, a [T, Hv]``.

    ``"qwen3_next"``: rows interleaved per key head, ``[q (Dk), k (Dk), v (r*Dv), z (r*Dv)]`` and ``[b (r), a (r)]``
    (HF ``Qwen3NextGatedDeltaNet.fix_query_key_value_ordering``); ``"qwen3_5"``: ``[q, k, v, z]`` and ``[b, a]``
    blocks (HF's separate ``in_proj_qkv``/``in_proj_z``/``in_proj_b``/``in_proj_a`` stacked).
    """
    T = qkvz.shape[0]
    dk, dv = head_k_dim, head_v_dim
    if layout == "qwen3_next":
        r = num_v_heads // num_k_heads
        q, k, v, z = qkvz.view(T, num_k_heads, -1).split([dk, dk, r * dv, r * dv], dim=-1)
        b, a = ba.view(T, num_k_heads, 2 * r).split([r, r], dim=-1)
        mixed = torch.cat([q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)], dim=-1)
    elif layout == "qwen3_5":
        mixed, z = qkvz.split([2 * num_k_heads * dk + num_v_heads * dv, num_v_heads * dv], dim=-1)
        b, a = ba.split([num_v_heads, num_v_heads], dim=-1)
    else:
        raise ValueError(f"split_projections: layout {layout!r} is not 'qwen3_next' or 'qwen3_5'")
    return mixed, z.reshape(T, num_v_heads, dv), b.reshape(T, num_v_heads), a.reshape(T, num_v_heads)


def split_conv_output(x: torch.Tensor, num_k_heads: int, num_v_heads: int, head_k_dim: int, head_v_dim: int):
    """Conv output ``[..., 2*Hk*Dk + Hv*Dv]`` -> q, k ``[..., Hk, Dk]``, v ``[..., Hv, Dv]``."""
    key_dim = num_k_heads * head_k_dim
    q, k, v = x.split([key_dim, key_dim, num_v_heads * head_v_dim], dim=-1)
    lead = x.shape[:-1]
    return (q.reshape(*lead, num_k_heads, head_k_dim), k.reshape(*lead, num_k_heads, head_k_dim),
            v.reshape(*lead, num_v_heads, head_v_dim))


# ------------------------------------------------------------------------------------------------ causal conv1d
def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    conv_state: torch.Tensor | None = None,
    lengths: torch.Tensor | None = None,
    activation: str | None = "silu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv1d over ``x [B, L, C]`` continuing from ``conv_state [B, C, K-1]`` (None = zeros).

    ``weight [C, K]`` is ``conv1d.weight.squeeze(1)``. Returns ``(out [B, L, C]`` in ``x.dtype`` after the activation,
    ``new_state [B, C, K-1]`` in the state's dtype)``: the last ``K-1`` inputs of ``state ++ x[:length]``, so with
    ``lengths`` (valid tokens per row, the rest padding) padding never reaches the state.

    As transformers' ``causal_conv1d_fn``/``causal_conv1d_update``: the conv (and activation) run in the weight dtype;
    a zero state is exactly HF's left zero padding of a fresh prompt.
    """
    B, L, C = x.shape
    K = weight.shape[-1]
    state_dtype = conv_state.dtype if conv_state is not None else x.dtype
    if conv_state is None:
        conv_state = x.new_zeros(B, C, K - 1)
    if L == 0:
        return x.new_zeros(B, 0, C), conv_state.to(state_dtype)
    full = torch.cat([conv_state.to(x.dtype), x.transpose(1, 2)], dim=-1)  # [B, C, K-1+L]
    out = F.conv1d(full.to(weight.dtype), weight.unsqueeze(1), groups=C)  # [B, C, L]: valid conv, no padding
    if activation == "silu":
        out = F.silu(out)
    elif activation is not None:
        raise ValueError(f"causal_conv1d: activation {activation!r} is not supported (expected 'silu' or None)")
    if lengths is None:
        new_state = full[..., full.shape[-1] - (K - 1):]
    else:  # inputs length .. length+K-2 of `full` are the last K-1 real ones (state included when length < K-1)
        idx = lengths.to(torch.long).view(B, 1, 1) + torch.arange(K - 1, device=x.device).view(1, 1, K - 1)
        new_state = full.gather(-1, idx.expand(B, C, K - 1))
    return out.transpose(1, 2).to(x.dtype), new_state.to(state_dtype)


def causal_conv1d_prefill(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor | None = None, activation: str | None = "silu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence: ``x [T, C]``, ``conv_state [C, K-1]`` or None -> ``(out [T, C], new_state [C, K-1])``."""
    out, state = causal_conv1d(x.unsqueeze(0), weight, None if conv_state is None else conv_state.unsqueeze(0),
                               activation=activation)
    return out[0], state[0]


def causal_conv1d_update(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, activation: str | None = "silu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of each of B sequences: ``x [B, C]``, ``conv_state [B, C, K-1]`` -> ``(out [B, C], new_state)``."""
    out, state = causal_conv1d(x.unsqueeze(1), weight, conv_state, activation=activation)
    return out[:, 0], state


# ------------------------------------------------------------------------------------------------ gated delta rule
def prepare_inputs(q, k, v, g, beta, use_qk_l2norm: bool, scale: float | None):
    """``[B, T, H, D]`` inputs -> float32 ``[B, Hv, T, D]`` with key heads expanded, q/k normalised and q scaled."""
    num_v_heads = v.shape[2]
    q, k = expand_kv_heads(q, num_v_heads, 2), expand_kv_heads(k, num_v_heads, 2)
    q, k, v, g, beta = (x.transpose(1, 2).float().contiguous() for x in (q, k, v, g, beta))
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    return q * (q.shape[-1] ** -0.5 if scale is None else scale), k, v, g, beta


def _initial_state(initial_state, batch: int, heads: int, k_dim: int, v_dim: int, like: torch.Tensor) -> torch.Tensor:
    if initial_state is None:
        return like.new_zeros(batch, heads, k_dim, v_dim)
    expected = (batch, heads, k_dim, v_dim)
    if tuple(initial_state.shape) != expected:
        raise ValueError(f"gated delta rule: initial_state has shape {tuple(initial_state.shape)}, expected {expected}")
    return initial_state.float()


def solve_unit_lower(a: torch.Tensor, rhs: torch.Tensor, method: str = "triangular") -> torch.Tensor:
    """``(I + strict_lower(a))^-1 @ rhs`` over the last two dims (the diagonal and upper part of ``a`` are ignored).

    ``"triangular"`` calls LAPACK's solver (as transformers eagerly does); ``"substitution"`` builds the inverse row by
    row with matmuls only (no data-dependent control flow: for tracers and compilers without a triangular solver).
    """
    if method == "triangular":
        return torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)
    if method != "substitution":
        raise ValueError(f"solve_unit_lower: method {method!r} is not 'triangular' or 'substitution'")
    n = a.shape[-1]
    # Row i of X = (I + L)^-1 R satisfies X_i = R_i - sum_{j<i} L_ij X_j: forward substitution, one row per step.
    rows = [rhs[..., 0:1, :]]
    for i in range(1, n):
        done = torch.cat(rows, dim=-2)  # [.., i, D]
        rows.append(rhs[..., i:i + 1, :] - a[..., i:i + 1, :i] @ done)
    return torch.cat(rows, dim=-2)


def chunk_scan(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state: torch.Tensor,
    chunk_size: int = 64, solve: str = "triangular",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked gated delta rule on prepared float32 ``[B, H, L, D]`` tensors from float32 ``state [B, H, Dk, Dv]``.

    Tokens with ``g = 0, beta = 0, k = 0`` leave the state exactly unchanged (decay ``exp(0) = 1``, zero write), which
    is how both the end-of-sequence padding here and the static-shape neuron variant keep padding out of the state.
    """
    B, H, L, Dk = k.shape
    Dv = v.shape[-1]
    C = chunk_size
    if L == 0:
        return v.new_zeros(B, H, 0, Dv), state
    pad = (-L) % C
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    n = (L + pad) // C
    q, k, v = (x.reshape(B, H, n, C, x.shape[-1]) for x in (q, k, v))
    g, beta = g.reshape(B, H, n, C), beta.reshape(B, H, n, C)

    gc = g.cumsum(-1)  # log of the decay from the chunk start through token t (inclusive)
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    # decay[i, j] = prod_{j < s <= i} exp(g_s) for i >= j; the upper triangle is masked before exp (it would overflow)
    decay = (gc.unsqueeze(-1) - gc.unsqueeze(-2)).masked_fill(~causal, float("-inf")).exp()
    k_beta = k * beta.unsqueeze(-1)
    # Within a chunk the C delta-rule writes are W = T (beta*v - beta*k S_0-part): T = (I + strict_lower(A))^-1 with
    # A[i, j] = beta_i <k_i, k_j> decay[i, j] (the UT transform). u: the writes from an empty state; w: how much each
    # write must subtract per unit of the chunk's initial state (keys decayed to the chunk start).
    a = (k_beta @ k.transpose(-1, -2)) * decay
    u = solve_unit_lower(a, v * beta.unsqueeze(-1), solve)
    w = solve_unit_lower(a, k_beta * gc.exp().unsqueeze(-1), solve)
    attn = (q @ k.transpose(-1, -2)) * decay  # intra-chunk q.k with decay, diagonal included
    q_decayed = q * gc.exp().unsqueeze(-1)  # reads of the chunk's initial state
    k_decayed = k * (gc[..., -1:] - gc).exp().unsqueeze(-1)  # writes decayed to the chunk end
    chunk_decay = gc[..., -1].exp()[..., None, None]

    outs = []
    for i in range(n):  # sequential part: one state update per chunk
        v_new = u[:, :, i] - w[:, :, i] @ state
        outs.append(q_decayed[:, :, i] @ state + attn[:, :, i] @ v_new)
        state = state * chunk_decay[:, :, i] + k_decayed[:, :, i].transpose(-1, -2) @ v_new
    out = torch.stack(outs, dim=2).reshape(B, H, n * C, Dv)[:, :, :L]
    return out, state


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    chunk_size: int = 64,
    use_qk_l2norm: bool = True,
    cu_seqlens: torch.Tensor | list[int] | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`chunk_gated_delta_rule_ref`; on a CUDA GPU with ``MODELGEN_GDN_PREFILL=fla`` and flash-linear-attention
    installed, fla's chunked Triton kernel (same algorithm, chunk size 64; see the module docstring for its accuracy)."""
    if q.is_cuda and chunk_size == 64 and settings.get("MODELGEN_GDN_PREFILL") == "fla" and _triton(q):
        from . import kernels as ggd

        if ggd.fla_chunk() is not None:
            if initial_state is None:
                n = q.shape[0] if cu_seqlens is None else len(cu_seqlens) - 1
                initial_state = q.new_zeros(n, v.shape[2], k.shape[-1], v.shape[-1], dtype=torch.float32)
            return ggd.chunk_prefill(q, k, v, g, beta, initial_state, use_qk_l2norm, scale, cu_seqlens)
    return chunk_gated_delta_rule_ref(q, k, v, g, beta, initial_state, chunk_size, use_qk_l2norm, cu_seqlens, scale)


def chunk_gated_delta_rule_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    chunk_size: int = 64,
    use_qk_l2norm: bool = True,
    cu_seqlens: torch.Tensor | list[int] | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill: ``q, k [B, T, Hk, Dk]``, ``v [B, T, Hv, Dv]``, ``g`` (log decay) and ``beta [B, T, Hv]``.

    Returns ``(out [B, T, Hv, Dv]`` in ``q.dtype``, ``final_state [N, Hv, Dk, Dv]`` float32)`` where ``N = B``, or the
    number of sequences when ``cu_seqlens [N + 1]`` gives the offsets of variable-length sequences packed in ``T``
    (then ``B`` must be 1 and ``initial_state`` has ``N`` rows; fla's varlen convention). ``initial_state`` None means
    zeros.
    """
    if cu_seqlens is None:
        qf, kf, vf, gf, bf = prepare_inputs(q, k, v, g, beta, use_qk_l2norm, scale)
        state = _initial_state(initial_state, q.shape[0], vf.shape[1], kf.shape[-1], vf.shape[-1], vf)
        out, state = chunk_scan(qf, kf, vf, gf, bf, state, chunk_size)
        return out.transpose(1, 2).to(q.dtype), state
    if q.shape[0] != 1:
        raise ValueError(f"chunk_gated_delta_rule: with cu_seqlens the batch must be 1, got {q.shape[0]}")
    offsets = cu_seqlens.tolist() if isinstance(cu_seqlens, torch.Tensor) else list(cu_seqlens)
    num_seqs = len(offsets) - 1
    states = _initial_state(initial_state, num_seqs, v.shape[2], k.shape[-1], v.shape[-1], v.float())
    outs, finals = [], []
    for i in range(num_seqs):  # reference: one sequence at a time, no padding across sequences
        s, e = offsets[i], offsets[i + 1]
        out, final = chunk_gated_delta_rule_ref(
            q[:, s:e], k[:, s:e], v[:, s:e], g[:, s:e], beta[:, s:e], states[i:i + 1], chunk_size, use_qk_l2norm,
            scale=scale,
        )
        outs.append(out)
        finals.append(final)
    return torch.cat(outs, dim=1), torch.cat(finals, dim=0)


def recurrent_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    use_qk_l2norm: bool = True,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token by token; same shapes and result as :func:`chunk_gated_delta_rule` without ``cu_seqlens``.

    Decode is ``T = 1`` with one row per sequence. Returns ``(out [B, T, Hv, Dv]`` in ``q.dtype``, ``final_state``
    float32 ``[B, Hv, Dk, Dv])``.
    """
    qf, kf, vf, gf, bf = prepare_inputs(q, k, v, g, beta, use_qk_l2norm, scale)
    state = _initial_state(initial_state, q.shape[0], vf.shape[1], kf.shape[-1], vf.shape[-1], vf)
    outs = []
    for t in range(q.shape[1]):
        k_t = kf[:, :, t].unsqueeze(-1)  # [B, H, Dk, 1]
        state = state * gf[:, :, t].exp()[..., None, None]
        delta = (vf[:, :, t] - (state * k_t).sum(-2)) * bf[:, :, t].unsqueeze(-1)  # beta (v - S^T k)
        state = state + k_t * delta.unsqueeze(-2)
        outs.append((state * qf[:, :, t].unsqueeze(-1)).sum(-2))
    out = torch.stack(outs, dim=2) if outs else vf.new_zeros(vf.shape)
    return out.transpose(1, 2).to(q.dtype), state


# ------------------------------------------------------------------------------------------------ shape-static mixer
# Conv + delta rule over state-pool slots with no host reads, no data-dependent shapes or branches: one traced graph
# per bucket (neuron, ``torch.compile(fullgraph=True)``) or per CUDA-graph decode batch size.
#
# Metadata (tensors):
#   seq_ids     [T] int   row of each flattened token (-1 = padding token); a row's tokens are contiguous and rows appear
#                         in order (how the neuron runner packs a prefill bucket); decode is one token per row
#   state_slots [R] int64 state-pool slot of each row (-1 = empty row: its state is neither read nor written)
#   state_fresh [R] bool  True when the row has no computed token yet: its state is read as zeros
#
# Prefill scatters the T flattened tokens into an [R, T] padded batch (row r holds its tokens first, then zeros), so
# every row runs the chunked rule from its own state in one batched call. Padding positions carry g = 0, beta = 0,
# k = 0, which leaves a state exactly unchanged (see chunk_scan), and the conv state is taken at each row's length.
# Rows with slot -1 write nothing (write_state_rows).


def _masked(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``x`` where ``keep`` (broadcast from the left), exact zeros elsewhere (garbage and NaN included)."""
    keep = keep.view(*keep.shape, *([1] * (x.dim() - keep.dim())))
    return torch.where(keep, x, torch.zeros_like(x))


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
    """Conv + gated delta rule of one bucket; returns the core output ``[T, Hv, Dv]`` (zeros on padding tokens and
    rows with slot -1) and advances the states of the real rows in ``conv_pool [S, C, K-1]`` / ``recurrent_pool [S, Hv, Dk, Dv]``.

    ``mixed [T, C]`` is the conv input ``[q, k, v]`` and ``g, beta [T, Hv]`` the gates (``split_projections``,
    ``gdn_gating``); ``conv_weight [C, K]``. ``decode`` (a Python bool: one graph per path) means one token per row
    (``T == R``).
    """
    if decode and _triton(mixed):  # conv update + delta-rule step: two launches, states advanced in place
        from . import kernels as ggd

        return ggd.decode(mixed, g, beta, conv_weight, conv_pool, recurrent_pool, seq_ids, state_slots, state_fresh,
                          num_k_heads=num_k_heads, head_k_dim=head_k_dim, head_v_dim=head_v_dim)
    return gdn_mixer_static_ref(mixed, g, beta, conv_weight, conv_pool, recurrent_pool, seq_ids, state_slots,
                                state_fresh, num_k_heads=num_k_heads, head_k_dim=head_k_dim, head_v_dim=head_v_dim,
                                decode=decode, chunk_size=chunk_size)


def gdn_mixer_static_ref(
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
    """The torch definition of :func:`gdn_mixer_static` (also its CPU and neuron path)."""
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

    out, conv1 = causal_conv1d(x, conv_weight, conv0, lengths=lens)
    q, k, v = (_masked(t, valid_tok) for t in split_conv_output(out, *heads))
    if decode:
        o, rec1 = recurrent_gated_delta_rule(q, k, v, gp, bp, rec0)
    else:
        qf, kf, vf, gf, bf = prepare_inputs(q, k, v, gp, bp, use_qk_l2norm=True, scale=None)
        o, rec1 = chunk_scan(qf, kf, vf, gf, bf, rec0, chunk_size, solve="substitution")
        o = o.transpose(1, 2).to(q.dtype)  # [R, T, Hv, Dv]
    write_state_rows(conv_pool, state_slots, real, conv1)
    write_state_rows(recurrent_pool, state_slots, real, rec1)

    if decode:
        return _masked(o[:, 0], real)  # padding rows and slot -1 rows: zeros
    # back to the flattened tokens: token t is position t - starts[row] of its row
    row = seq_ids.clamp(min=0)
    pos = (torch.arange(T, device=mixed.device) - starts[row]).clamp(min=0, max=T - 1)
    return _masked(o.reshape(R * T, num_v_heads, head_v_dim)[row * T + pos], (seq_ids >= 0) & real[row])
