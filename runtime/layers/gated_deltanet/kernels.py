"""Triton kernels of the Gated DeltaNet decode step (Qwen3-Next / Qwen3.5), and the optional fla prefill.

The torch references of ``runtime/layers/gated_deltanet/ops.py`` define every function here; these compute the same values
with no host reads and no data-dependent shapes, so a decode step is capturable in a CUDA graph:

* :func:`gdn_gating` -- ``g = -exp(A_log) * softplus(a + dt_bias)`` (float32) and ``beta = sigmoid(b)`` in one launch
  (the reference is six elementwise launches);
* :func:`conv_update` -- one token of the depthwise causal conv1d + SiLU per row, reading and advancing each row's
  conv state in the pool slot it names;
* :func:`recurrent_step` -- one token of the gated delta rule per row: L2-normalised q/k, decay, delta-rule write and
  read, with the state read from and written back to the pool slot in place (each state element is read once and
  written once: the step is bound by the state bytes, 2 x 4 B x Hv x Dk x Dv per row per layer);
* :func:`gated_rms_norm` -- ``rmsnorm(x) * w * silu(z)`` per head row in one launch;
* :func:`decode_with_gating` -- the layer's decode path: conv update, then the delta rule with each program's gates
  computed in place (bitwise :func:`gdn_gating` + :func:`decode`, two launches fewer);
* :func:`window_decode` -- a speculative verify window of q tokens per sequence: the same two launches walking the
  window, each state read and written once (bitwise q calls of the one-token path).

Rows whose slot is negative (padding rows of a CUDA-graph bucket) produce zeros and touch no state; ``fresh`` rows read
their state as zeros (their slot may hold a finished request's state).

Prefill runs flash-linear-attention's chunked kernel (``fla.ops.gated_delta_rule.chunk_gated_delta_rule``, pure Triton,
optional: ``pip install fla-core``) when it imports; its chunked algorithm is the one ``chunk_gated_delta_rule`` of the
reference implements (UT transform per 64-token chunk), with q/k L2-normalised in the kernel.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ...ops.gpu import next_pow2


# ------------------------------------------------------------------------------------------------------- gating
@triton.jit
def _gating_kernel(a_ptr, b_ptr, alog_ptr, dt_ptr, g_ptr, beta_ptr, s_a, s_b, H, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BLOCK)
    m = h < H
    a = tl.load(a_ptr + row * s_a + h, mask=m, other=0.0)
    b = tl.load(b_ptr + row * s_b + h, mask=m, other=0.0)
    g, beta = _gates(a, b, tl.load(alog_ptr + h, mask=m, other=0.0), tl.load(dt_ptr + h, mask=m, other=0.0))
    tl.store(g_ptr + row * H + h, g, mask=m)
    # beta = sigmoid(b) rounded to b's dtype, as the reference's b.sigmoid()
    tl.store(beta_ptr + row * H + h, beta.to(beta_ptr.dtype.element_ty), mask=m)


@triton.jit
def _gates(a, b, alog, dt):
    """``g = -exp(A_log) * softplus(a + dt_bias)`` and ``sigmoid(b)``, both in float32 (beta not yet rounded)."""
    x = a.to(tl.float32) + dt.to(tl.float32)
    # softplus as torch computes it (threshold 20: x itself above), log1p(exp(x)) below
    sp = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))
    return -tl.exp(alog.to(tl.float32)) * sp, 1.0 / (1.0 + tl.exp(-b.to(tl.float32)))


def gdn_gating(A_log: torch.Tensor, a: torch.Tensor, dt_bias: torch.Tensor, b: torch.Tensor):
    """``a, b [T, H]`` (views with unit last stride allowed) -> ``(g [T, H] float32, beta [T, H] b.dtype)``."""
    T, H = a.shape
    if a.stride(-1) != 1:
        a = a.contiguous()
    if b.stride(-1) != 1:
        b = b.contiguous()
    g = torch.empty((T, H), dtype=torch.float32, device=a.device)
    beta = torch.empty((T, H), dtype=b.dtype, device=a.device)
    if T:
        _gating_kernel[(T,)](a, b, A_log, dt_bias, g, beta, a.stride(0), b.stride(0), H, BLOCK=next_pow2(H),
                             num_warps=1)
    return g, beta


# ------------------------------------------------------------------------------------------------------- conv1d
@triton.jit
def _conv_update_kernel(
    x_ptr, w_ptr, pool_ptr, slot_ptr, fresh_ptr, seq_ptr, o_ptr, s_x, s_o, s_pool, C,
    K: tl.constexpr, BLOCK_C: tl.constexpr, SILU: tl.constexpr, HAS_SEQ: tl.constexpr = True,
):
    row = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = c < C
    slot = tl.load(slot_ptr + row).to(tl.int64)
    # a real row: a slot, and its token is its own (seq_ids[r] == r; -1 marks a padding token). Without seq ids
    # (HAS_SEQ False) row r is token r by construction: no arange tensor, so no launch to build one.
    live = slot >= 0
    if HAS_SEQ:
        live = live & (tl.load(seq_ptr + row).to(tl.int32) == row)
    keep = live & (tl.load(fresh_ptr + row).to(tl.int32) == 0)
    x = tl.load(x_ptr + row.to(tl.int64) * s_x + c, mask=cm, other=0.0)
    base = pool_ptr + tl.maximum(slot, 0) * s_pool + c * (K - 1)
    rd = cm & keep
    # conv in float32 over the state (inputs K-1 .. 1 tokens back) and this token, weights [C, K] oldest first
    acc = tl.load(w_ptr + c * K + (K - 1), mask=cm, other=0.0).to(tl.float32) * x.to(tl.float32)
    for j in tl.static_range(K - 1):
        s = tl.load(base + j, mask=rd, other=0.0)
        acc += tl.load(w_ptr + c * K + j, mask=cm, other=0.0).to(tl.float32) * s.to(tl.float32)
        if j > 0:  # shift left: slot j-1 takes slot j (the reads above happened first, in this program)
            tl.store(base + (j - 1), s, mask=cm & live)
    tl.store(base + (K - 2), x.to(pool_ptr.dtype.element_ty), mask=cm & live)
    acc = acc.to(w_ptr.dtype.element_ty).to(tl.float32)  # the reference's conv output, in the weight dtype
    if SILU:
        acc = acc / (1.0 + tl.exp(-acc))
    acc = tl.where(live, acc, 0.0)
    tl.store(o_ptr + row.to(tl.int64) * s_o + c, acc.to(o_ptr.dtype.element_ty), mask=cm)


def conv_update(x: torch.Tensor, weight: torch.Tensor, conv_pool: torch.Tensor, slots: torch.Tensor,
                fresh: torch.Tensor, seq_ids: torch.Tensor | None, silu: bool = True) -> torch.Tensor:
    """``x [R, C]`` one token per row, ``weight [C, K]``, ``conv_pool [S, C, K-1]`` (advanced in place for real rows:
    ``slots[r] >= 0`` and ``seq_ids[r] == r``; ``seq_ids=None``: every row's token is its own), ``fresh [R]`` ->
    ``out [R, C]`` (x dtype; zeros on other rows)."""
    R, C = x.shape
    K = weight.shape[-1]
    if x.stride(-1) != 1:
        x = x.contiguous()
    weight = weight.contiguous()
    if not conv_pool.is_contiguous():
        raise ValueError("conv_update: conv_pool must be contiguous [num_slots, C, K-1]")
    out = torch.empty((R, C), dtype=x.dtype, device=x.device)
    if R:
        block = 256
        _conv_update_kernel[(R, triton.cdiv(C, block))](
            x, weight, conv_pool, slots, fresh, slots if seq_ids is None else seq_ids, out, x.stride(0), out.stride(0),
            conv_pool.stride(0), C, K=K, BLOCK_C=block, SILU=silu, HAS_SEQ=seq_ids is not None, num_warps=4)
    return out


# ---------------------------------------------------------------------------------------------- delta rule step
@triton.jit
def _recurrent_kernel(
    x_ptr, g_ptr, beta_ptr, pool_ptr, slot_ptr, fresh_ptr, seq_ptr, o_ptr, s_x, s_pool, scale, eps,
    HV: tl.constexpr, R: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, KEY_DIM: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, L2NORM: tl.constexpr,
):
    row = tl.program_id(0)
    h = tl.program_id(1)
    vb = tl.program_id(2)
    slot = tl.load(slot_ptr + row).to(tl.int64)
    live = (slot >= 0) & (tl.load(seq_ptr + row).to(tl.int32) == row)
    keep = live & (tl.load(fresh_ptr + row).to(tl.int32) == 0)
    dv = vb * BV + tl.arange(0, BV)
    vm = dv < DV
    g = tl.load(g_ptr + row * HV + h).to(tl.float32)
    beta = tl.load(beta_ptr + row * HV + h).to(tl.float32)
    o = _delta_rule_tile(x_ptr + row.to(tl.int64) * s_x, pool_ptr, slot, live, keep, h, dv, vm, g, beta, s_pool,
                         scale, eps, R, DK, DV, KEY_DIM, BK, L2NORM)
    tl.store(o_ptr + (row.to(tl.int64) * HV + h) * DV + dv, o.to(o_ptr.dtype.element_ty), mask=vm)


@triton.jit
def _delta_rule_tile(xrow, pool_ptr, slot, live, keep, h, dv, vm, g, beta, s_pool, scale, eps, R: tl.constexpr,
                     DK: tl.constexpr, DV: tl.constexpr, KEY_DIM: tl.constexpr, BK: tl.constexpr,
                     L2NORM: tl.constexpr):
    """One token of the gated delta rule for value head ``h``, value columns ``dv``: the state tile read once from
    the pool slot (zeros where not ``keep``), decayed, delta-rule written, read by q, and written back (``live``
    rows only); returns ``o[dv]`` in float32 (zeros where not ``live``)."""
    kh = h // R  # key head serving this value head (repeat_interleave grouping)
    dk = tl.arange(0, BK)
    km = dk < DK
    sp = pool_ptr + tl.maximum(slot, 0) * s_pool + h * (DK * DV) + dk[:, None] * DV + dv[None, :]
    m2 = km[:, None] & vm[None, :]
    S = tl.load(sp, mask=m2 & keep, other=0.0).to(tl.float32)  # [BK, BV]
    S, o = _delta_token(xrow, S, kh, h, dk, km, dv, vm, g, beta, scale, eps, DK, DV, KEY_DIM, L2NORM)
    tl.store(sp, S.to(pool_ptr.dtype.element_ty), mask=m2 & live)
    return tl.where(live, o, 0.0)


@triton.jit
def _delta_token(xrow, S, kh, h, dk, km, dv, vm, g, beta, scale, eps, DK: tl.constexpr, DV: tl.constexpr,
                 KEY_DIM: tl.constexpr, L2NORM: tl.constexpr):
    """One token's delta-rule update of the float32 state tile ``S [BK, BV]`` held in registers, with q, k, v read
    from the token's conv-output row ``xrow``: returns ``(S', o[dv] = S'^T q)`` in float32."""
    q = tl.load(xrow + kh * DK + dk, mask=km, other=0.0).to(tl.float32)
    k = tl.load(xrow + KEY_DIM + kh * DK + dk, mask=km, other=0.0).to(tl.float32)
    v = tl.load(xrow + 2 * KEY_DIM + h * DV + dv, mask=vm, other=0.0).to(tl.float32)
    if L2NORM:
        q = q * tl.math.rsqrt(tl.sum(q * q, 0) + eps)
        k = k * tl.math.rsqrt(tl.sum(k * k, 0) + eps)
    q = q * scale
    S = S * tl.exp(g)
    delta = (v - tl.sum(S * k[:, None], 0)) * beta  # beta (v - S^T k)
    S = S + k[:, None] * delta[None, :]
    return S, tl.sum(S * q[:, None], 0)  # S^T q


def recurrent_step(x: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, pool: torch.Tensor, slots: torch.Tensor,
                   fresh: torch.Tensor, seq_ids: torch.Tensor, *, num_k_heads: int, head_k_dim: int, head_v_dim: int,
                   use_qk_l2norm: bool = True, scale: float | None = None, eps: float = 1e-6) -> torch.Tensor:
    """One token per row: ``x [R, 2*Hk*Dk + Hv*Dv]`` (the conv output ``[q, k, v]``), ``g, beta [R, Hv]``, the state
    pool ``[S, Hv, Dk, Dv]`` (advanced in place) -> ``o [R, Hv, Dv]`` in ``x.dtype``."""
    Rn = x.shape[0]
    Hv = g.shape[-1]
    if x.stride(-1) != 1:
        x = x.contiguous()
    g, beta = g.contiguous(), beta.contiguous()
    if not pool.is_contiguous():
        raise ValueError("recurrent_step: the state pool must be contiguous [num_slots, Hv, Dk, Dv]")
    out = torch.empty((Rn, Hv, head_v_dim), dtype=x.dtype, device=x.device)
    if Rn:
        BK = next_pow2(head_k_dim)
        BV = min(32, next_pow2(head_v_dim))  # [128 x 32] fp32 tile: 32 registers a thread at 4 warps
        _recurrent_kernel[(Rn, Hv, triton.cdiv(head_v_dim, BV))](
            x, g, beta, pool, slots, fresh, seq_ids, out, x.stride(0), pool.stride(0),
            head_k_dim ** -0.5 if scale is None else scale, eps,
            HV=Hv, R=Hv // num_k_heads, DK=head_k_dim, DV=head_v_dim, KEY_DIM=num_k_heads * head_k_dim,
            BK=BK, BV=BV, L2NORM=use_qk_l2norm, num_warps=4)
    return out


def decode(mixed, g, beta, conv_weight, conv_pool, recurrent_pool, seq_ids, slots, fresh, *, num_k_heads, head_k_dim,
           head_v_dim) -> torch.Tensor:
    """The decode path of ``gdn_mixer_static``: conv update then the delta-rule step, two launches."""
    slots, fresh, seq_ids = slots.contiguous(), fresh.contiguous(), seq_ids.contiguous()
    x = conv_update(mixed, conv_weight, conv_pool, slots, fresh, seq_ids)
    return recurrent_step(x, g, beta, recurrent_pool, slots, fresh, seq_ids, num_k_heads=num_k_heads, head_k_dim=head_k_dim,
                          head_v_dim=head_v_dim)


# ---------------------------------------------------------------------------- gating inside the delta-rule launch
# The decode chain between a GDN layer's projections and its gated norm was four launches (seq-id arange, gating,
# conv, delta rule), each a few microseconds at batch 1 against well under a microsecond of bytes. This path runs
# two: the conv update with no seq-id tensor (row i is token i), then the delta-rule kernel with its program's g and
# beta computed in place (the same _gates arithmetic as _gating_kernel, and the same tiles as _recurrent_kernel, so
# its output and states are bitwise those of the unfused chain). The conv stays its own launch: its in-place shift
# of the conv state cannot be shared with the programs that read it without a grid-wide barrier. (Moving the gated
# RMSNorm in as well, one program per (row, head) over all Dv columns, measured slower: bench/NOTES-gdn.md.)
# ``FUSED_DECODE`` is the path the layer takes (bench/gdn_ab.py times both in one process).
FUSED_DECODE = True


@triton.jit
def _gated_delta_kernel(
    x_ptr, a_ptr, b_ptr, alog_ptr, dt_ptr, pool_ptr, slot_ptr, fresh_ptr, o_ptr, NR, s_x, s_a, s_b, s_pool, scale,
    eps, HV: tl.constexpr, R: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, KEY_DIM: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, L2NORM: tl.constexpr,
):
    row = tl.program_id(0)
    h = tl.program_id(1)
    vb = tl.program_id(2)
    inb = row < NR  # rows past the batch are padding tokens: zeros out, no state touched
    slot = tl.load(slot_ptr + row, mask=inb, other=-1).to(tl.int64)
    live = slot >= 0
    keep = live & (tl.load(fresh_ptr + row, mask=inb, other=1).to(tl.int32) == 0)
    a = tl.load(a_ptr + row.to(tl.int64) * s_a + h)
    b = tl.load(b_ptr + row.to(tl.int64) * s_b + h)
    g, beta = _gates(a, b, tl.load(alog_ptr + h), tl.load(dt_ptr + h))
    beta = beta.to(b_ptr.dtype.element_ty).to(tl.float32)  # rounded to b's dtype, as gdn_gating returns it
    dv = vb * BV + tl.arange(0, BV)
    vm = dv < DV
    xrow = x_ptr + tl.minimum(row, NR - 1).to(tl.int64) * s_x  # an in-bounds row for padding (its o is zeroed)
    o = _delta_rule_tile(xrow, pool_ptr, slot, live, keep, h, dv, vm, g, beta, s_pool, scale, eps, R, DK, DV,
                         KEY_DIM, BK, L2NORM)
    tl.store(o_ptr + (row.to(tl.int64) * HV + h) * DV + dv, o.to(o_ptr.dtype.element_ty), mask=vm)


def decode_with_gating(mixed, a, b, A_log, dt_bias, conv_weight, conv_pool, recurrent_pool, slots, fresh, *,
                       num_k_heads, head_k_dim, head_v_dim, use_qk_l2norm: bool = True, scale: float | None = None,
                       eps: float = 1e-6) -> torch.Tensor:
    """``gdn_gating`` + ``gdn_mixer_static(decode=True)`` of a GDN layer in two launches: ``mixed [T, C]`` (conv
    input), ``a, b [T, Hv]`` (views with unit last stride allowed); row i < ``n = slots.shape[0]`` is sequence i's
    token, rows past n are padding tokens -> core ``[T, Hv, Dv]`` in ``mixed.dtype`` (zeros on padding rows and slot
    -1 rows), the conv and recurrent pools advanced in place as :func:`decode` advances them."""
    T = mixed.shape[0]
    Hv = A_log.shape[0]
    n = slots.shape[0]
    out = torch.empty((T, Hv, head_v_dim), dtype=mixed.dtype, device=mixed.device)
    if T == 0:
        return out
    if n == 0:
        return out.zero_()
    slots, fresh = slots.contiguous(), fresh.contiguous()
    x = conv_update(mixed[:n], conv_weight, conv_pool, slots, fresh, None)
    if a.stride(-1) != 1:
        a = a.contiguous()
    if b.stride(-1) != 1:
        b = b.contiguous()
    if not recurrent_pool.is_contiguous():
        raise ValueError("decode_with_gating: the state pool must be contiguous [num_slots, Hv, Dk, Dv]")
    BV = min(32, next_pow2(head_v_dim))  # recurrent_step's tile: the same programs, the same sums
    _gated_delta_kernel[(T, Hv, triton.cdiv(head_v_dim, BV))](
        x, a, b, A_log, dt_bias, recurrent_pool, slots, fresh, out, n, x.stride(0), a.stride(0), b.stride(0),
        recurrent_pool.stride(0), head_k_dim ** -0.5 if scale is None else scale, eps,
        HV=Hv, R=Hv // num_k_heads, DK=head_k_dim, DV=head_v_dim, KEY_DIM=num_k_heads * head_k_dim,
        BK=next_pow2(head_k_dim), BV=BV, L2NORM=use_qk_l2norm, num_warps=4)
    return out


# ------------------------------------------------------------------------- multi-token window (speculative verify)
# A graphed speculative verify step feeds each sequence a fixed window of q = K + 1 token slots (the last token and
# its drafts, the first seq_lens[r] of them real). Running the one-token decode once per slot column costs ~8 launches
# a column (where/zeros/contiguous for the column's inputs, seq-id arange, conv, delta rule, the stack); these two
# launches advance the states over the whole window: the conv kernel walks the window's tokens in one program per
# (row, channel block) -- the same program reads and shifts the conv history, so no race -- and the delta-rule
# kernel keeps each (row, value head, 32-column) state tile in registers over the q tokens, reading and writing the
# state once per window instead of once per token. Every token gets the one-token path's arithmetic in the same
# order (the state rounded to the pool dtype between tokens, as the pool round trip did), so outputs and states are
# bitwise those of the per-column loop (which it replaced on the GPU after a paired A/B: bench/NOTES-mtp.md).


@triton.jit
def _conv_window_kernel(
    x_ptr, w_ptr, pool_ptr, slot_ptr, fresh_ptr, len_ptr, o_ptr, ck_ptr, s_x, s_o, s_pool, s_ck, C,
    Q: tl.constexpr, K: tl.constexpr, BLOCK_C: tl.constexpr, SILU: tl.constexpr, HAS_CK: tl.constexpr,
):
    row = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = c < C
    slot = tl.load(slot_ptr + row).to(tl.int64)
    live = slot >= 0
    n = tl.where(live, tl.load(len_ptr + row).to(tl.int32), 0)  # real tokens of this row's window
    keep = live & (tl.load(fresh_ptr + row).to(tl.int32) == 0)
    base = pool_ptr + tl.maximum(slot, 0) * s_pool + c * (K - 1)
    xbase = x_ptr + (row.to(tl.int64) * Q) * s_x + c
    obase = o_ptr + (row.to(tl.int64) * Q) * s_o + c
    rd = cm & keep
    # the window's inputs as one sequence: e[0 .. K-2] the conv history (zeros where not keep), e[K-1 + j] token j
    for j in tl.static_range(Q):
        x = tl.load(xbase + j * s_x, mask=cm, other=0.0)
        acc = tl.load(w_ptr + c * K + (K - 1), mask=cm, other=0.0).to(tl.float32) * x.to(tl.float32)
        for i in tl.static_range(K - 1):  # tap i reads e[j + i]
            if j + i < K - 1:
                s = tl.load(base + (j + i), mask=rd, other=0.0)
            else:
                s = tl.load(xbase + (j + i - (K - 1)) * s_x, mask=cm, other=0.0)
            acc += tl.load(w_ptr + c * K + i, mask=cm, other=0.0).to(tl.float32) * s.to(tl.float32)
        acc = acc.to(w_ptr.dtype.element_ty).to(tl.float32)  # the reference's conv output, in the weight dtype
        if SILU:
            acc = acc / (1.0 + tl.exp(-acc))
        acc = tl.where(j < n, acc, 0.0)
        tl.store(obase + j * s_o, acc.to(o_ptr.dtype.element_ty), mask=cm)
        if HAS_CK:  # the history after token j, e[j+1 .. j+K-1], into the slot's checkpoint j (real tokens only)
            ck = ck_ptr + tl.maximum(slot, 0) * s_ck + j * (C * (K - 1)) + c * (K - 1)
            for i in tl.static_range(K - 1):
                if j + 1 + i < K - 1:
                    e = tl.load(base + (j + 1 + i), mask=rd, other=0.0)
                else:
                    e = tl.load(xbase + (j + 1 + i - (K - 1)) * s_x, mask=cm, other=0.0)
                tl.store(ck + i, e.to(ck_ptr.dtype.element_ty), mask=cm & live & (j < n))
    # new history: slot i takes e[n + i] (n >= 1 real tokens shifted in). In ascending i the history position read,
    # n + i, is always past every position written so far (0 .. i-1): no element is read after it is overwritten.
    for i in tl.static_range(K - 1):
        p = n + i
        from_pool = p < K - 1
        old = tl.load(base + tl.minimum(p, K - 2), mask=rd & from_pool, other=0.0)
        new = tl.load(xbase + tl.maximum(p - (K - 1), 0) * s_x, mask=cm & live & (p >= K - 1), other=0.0)
        tl.store(base + i, tl.where(from_pool, old.to(pool_ptr.dtype.element_ty), new.to(pool_ptr.dtype.element_ty)),
                 mask=cm & live)


@triton.jit
def _gated_delta_window_kernel(
    x_ptr, a_ptr, b_ptr, alog_ptr, dt_ptr, pool_ptr, slot_ptr, fresh_ptr, len_ptr, o_ptr, ck_ptr, s_x, s_a, s_b,
    s_pool, s_ck, scale, eps, Q: tl.constexpr, HV: tl.constexpr, R: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    KEY_DIM: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, L2NORM: tl.constexpr, HAS_CK: tl.constexpr,
):
    row = tl.program_id(0)
    h = tl.program_id(1)
    vb = tl.program_id(2)
    slot = tl.load(slot_ptr + row).to(tl.int64)
    live = slot >= 0
    n = tl.where(live, tl.load(len_ptr + row).to(tl.int32), 0)
    keep = live & (tl.load(fresh_ptr + row).to(tl.int32) == 0)
    kh = h // R
    dk = tl.arange(0, BK)
    km = dk < DK
    dv = vb * BV + tl.arange(0, BV)
    vm = dv < DV
    sp = pool_ptr + tl.maximum(slot, 0) * s_pool + h * (DK * DV) + dk[:, None] * DV + dv[None, :]
    m2 = km[:, None] & vm[None, :]
    S = tl.load(sp, mask=m2 & keep, other=0.0).to(tl.float32)  # read once for the window
    alog, dt = tl.load(alog_ptr + h), tl.load(dt_ptr + h)
    for j in tl.static_range(Q):
        t = row.to(tl.int64) * Q + j
        g, beta = _gates(tl.load(a_ptr + t * s_a + h), tl.load(b_ptr + t * s_b + h), alog, dt)
        beta = beta.to(b_ptr.dtype.element_ty).to(tl.float32)  # rounded to b's dtype, as gdn_gating returns it
        S1, o = _delta_token(x_ptr + t * s_x, S, kh, h, dk, km, dv, vm, g, beta, scale, eps, DK, DV, KEY_DIM, L2NORM)
        real = j < n
        S = tl.where(real, S1.to(pool_ptr.dtype.element_ty).to(tl.float32), S)  # the pool's rounding per token
        tl.store(o_ptr + (t * HV + h) * DV + dv, tl.where(real, o, 0.0).to(o_ptr.dtype.element_ty), mask=vm)
        if HAS_CK:  # the state after token j into the slot's checkpoint j (real tokens only)
            ck = ck_ptr + tl.maximum(slot, 0) * s_ck + j * (HV * DK * DV) + h * (DK * DV)
            tl.store(ck + dk[:, None] * DV + dv[None, :], S.to(ck_ptr.dtype.element_ty), mask=m2 & live & real)
    tl.store(sp, S.to(pool_ptr.dtype.element_ty), mask=m2 & live)  # written once


def window_decode(mixed, a, b, A_log, dt_bias, conv_weight, conv_pool, recurrent_pool, slots, fresh, seq_lens, q, *,
                  num_k_heads, head_k_dim, head_v_dim, checkpoints=None, use_qk_l2norm: bool = True,
                  scale: float | None = None, eps: float = 1e-6) -> torch.Tensor:
    """A fixed-shape window of ``q`` token slots per sequence in two launches: ``mixed [R*q, C]`` (conv input), ``a,
    b [R*q, Hv]`` (views with unit last stride allowed); sequence r owns tokens ``[r*q, (r+1)*q)``, the first
    ``seq_lens[r]`` real (``1 <= seq_lens[r] <= q``), ``fresh[r]`` for its first token; slot -1 rows are padding
    sequences -> core ``[R*q, Hv, Dv]`` in ``mixed.dtype`` (zeros on padding tokens and rows), the conv and
    recurrent pools advanced in place over each row's real tokens, as ``q`` one-token :func:`decode_with_gating`
    calls (column j: slot -1 where ``seq_lens <= j``, fresh for j = 0 only) advance them, bit for bit.

    ``checkpoints``: ``(conv [S, >=q, C, K-1], recurrent [S, >=q, Hv, Dk, Dv])`` (``StatePool.checkpoints``) also
    receive, for each real token j of a sequence, its conv history and state after token j at ``[slot, j]`` --
    what the pool would hold had the window stopped there (a speculative rollback picks one instead of re-running)."""
    T, C = mixed.shape
    Hv = A_log.shape[0]
    Rn = slots.shape[0]
    if T != Rn * q:
        raise ValueError(f"window_decode: {T} tokens for {Rn} sequences of {q} slots")
    out = torch.empty((T, Hv, head_v_dim), dtype=mixed.dtype, device=mixed.device)
    if T == 0:
        return out
    slots, fresh, seq_lens = slots.contiguous(), fresh.contiguous(), seq_lens.contiguous()
    if mixed.stride(-1) != 1:
        mixed = mixed.contiguous()
    if a.stride(-1) != 1:
        a = a.contiguous()
    if b.stride(-1) != 1:
        b = b.contiguous()
    if not (conv_pool.is_contiguous() and recurrent_pool.is_contiguous()):
        raise ValueError("window_decode: the conv and state pools must be contiguous")
    conv_weight = conv_weight.contiguous()
    K = conv_weight.shape[-1]
    ck_conv, ck_rec = checkpoints if checkpoints is not None else (conv_pool, recurrent_pool)
    if checkpoints is not None and not (
            ck_conv.is_contiguous() and ck_rec.is_contiguous() and ck_conv.shape[1] >= q and ck_rec.shape[1] >= q
            and ck_conv.shape[2:] == conv_pool.shape[1:] and ck_rec.shape[2:] == recurrent_pool.shape[1:]):
        raise ValueError(f"window_decode: checkpoints {tuple(ck_conv.shape)} / {tuple(ck_rec.shape)} are not "
                         f"contiguous [num_slots, >={q}, *slot shape] of the pools")
    x = torch.empty((T, C), dtype=mixed.dtype, device=mixed.device)
    block = 256
    _conv_window_kernel[(Rn, triton.cdiv(C, block))](
        mixed, conv_weight, conv_pool, slots, fresh, seq_lens, x, ck_conv, mixed.stride(0), x.stride(0),
        conv_pool.stride(0), ck_conv.stride(0), C, Q=q, K=K, BLOCK_C=block, SILU=True,
        HAS_CK=checkpoints is not None, num_warps=4)
    BV = min(32, next_pow2(head_v_dim))  # recurrent_step's tile: the same sums
    _gated_delta_window_kernel[(Rn, Hv, triton.cdiv(head_v_dim, BV))](
        x, a, b, A_log, dt_bias, recurrent_pool, slots, fresh, seq_lens, out, ck_rec, x.stride(0), a.stride(0),
        b.stride(0), recurrent_pool.stride(0), ck_rec.stride(0), head_k_dim ** -0.5 if scale is None else scale, eps,
        Q=q, HV=Hv, R=Hv // num_k_heads, DK=head_k_dim, DV=head_v_dim, KEY_DIM=num_k_heads * head_k_dim,
        BK=next_pow2(head_k_dim), BV=BV, L2NORM=use_qk_l2norm, HAS_CK=checkpoints is not None, num_warps=4)
    return out


# ------------------------------------------------------------------------------------------------ gated RMSNorm
@triton.jit
def _gated_rms_kernel(x_ptr, z_ptr, w_ptr, o_ptr, s_x, s_z, eps, N: tl.constexpr, BLOCK: tl.constexpr,
                      ROUND_HW: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(x_ptr + row * s_x + offs, mask=m, other=0.0)
    xf = x.to(tl.float32)
    h = xf * tl.math.rsqrt(tl.sum(xf * xf, 0) / N + eps)
    # the reference's casts: normalised value rounded to x's dtype, times the weight (rounded as torch's promotion),
    # times silu(z) computed in float32, rounded once to x's dtype
    w = tl.load(w_ptr + offs, mask=m, other=0.0)
    hw = w.to(tl.float32) * h.to(x_ptr.dtype.element_ty).to(tl.float32)
    if ROUND_HW:  # weight and x of one dtype: torch rounds their product to it
        hw = hw.to(x_ptr.dtype.element_ty)
    z = tl.load(z_ptr + row * s_z + offs, mask=m, other=0.0).to(tl.float32)
    y = hw.to(tl.float32) * (z / (1.0 + tl.exp(-z)))
    tl.store(o_ptr + row * N + offs, y.to(o_ptr.dtype.element_ty), mask=m)


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x, z [..., N]`` -> ``rmsnorm(x) * weight * silu(z)`` in ``x.dtype`` (one program per row)."""
    N = x.shape[-1]
    x2, z2 = x.reshape(-1, N), z.reshape(-1, N)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if z2.stride(-1) != 1:
        z2 = z2.contiguous()
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    if x2.shape[0]:
        _gated_rms_kernel[(x2.shape[0],)](x2, z2, weight, out, x2.stride(0), z2.stride(0), eps, N=N,
                                          BLOCK=next_pow2(N), ROUND_HW=torch.promote_types(weight.dtype, x.dtype) == x.dtype,
                                          num_warps=1 if N <= 256 else 4)
    return out.view(x.shape)


# ------------------------------------------------------------------------------------------------ prefill (fla)
@functools.lru_cache(maxsize=None)
def fla_chunk():
    """fla's ``chunk_gated_delta_rule``, or None when flash-linear-attention (fla-core) is not installed."""
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception:  # ImportError, or an fla/triton version mismatch failing at import
        return None
    return chunk_gated_delta_rule


def chunk_prefill(q, k, v, g, beta, initial_state, use_qk_l2norm: bool, scale: float | None, cu_seqlens=None):
    """fla's chunked gated delta rule with the reference's conventions: ``[B, T, H, D]`` inputs (value heads grouped
    over key heads, fla's GVA), float32 initial/final state ``[N, Hv, Dk, Dv]``; output in ``q.dtype``."""
    fn = fla_chunk()
    if initial_state is not None:
        initial_state = initial_state.float().contiguous()
    if cu_seqlens is not None and not isinstance(cu_seqlens, torch.Tensor):
        cu_seqlens = torch.tensor(cu_seqlens, dtype=torch.long, device=q.device)
    o, state = fn(q.contiguous(), k.contiguous(), v.contiguous(), g.float().contiguous(), beta.contiguous(),
                  scale=scale, initial_state=initial_state, output_final_state=True,
                  use_qk_l2norm_in_kernel=use_qk_l2norm,
                  cu_seqlens=None if cu_seqlens is None else cu_seqlens.to(q.device, torch.long))
    return o.to(q.dtype), state.float()
