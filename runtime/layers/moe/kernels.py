"""Triton fused mixture-of-experts: router top-k, expert alignment, gate-up GEMM + activation, down GEMM + combine.

The same function as ``runtime/layers/moe/ops.py`` (``route`` and ``fused_moe(..., accumulate="sum")``), in five launches
with no host synchronisation and shapes fixed by ``(num_tokens, top_k, num_experts)`` alone, so decode steps capture
into CUDA graphs:

  1. ``route``       one program per token: softmax or sigmoid, optional correction bias and group-limited selection,
                     top-k by repeated arg-max, renormalise, scale (or GPT-OSS's top-k of raw logits, then softmax) (``[T, E]`` logits -> weights, int32 ids).
  2. ``_align``      one program: counts the (token, slot) pairs per expert (``tl.histogram``), pads each expert's
                     share to a multiple of ``BLOCK_M`` (prefix sum) and scatters pair ids into expert order, so every
                     ``BLOCK_M`` rows of the sorted list belong to one expert (vLLM's ``moe_align_block_size``).
                     Pairs of experts outside this rank's range are dropped here (expert parallelism); GLM-style
                     shared-expert slots are appended as ``num_shared`` extra pairs per token with weight 1.
  3. ``_gate_up``    one launch over (row block, column block) for all experts: ``x[tok] @ w13[e, gate/up].T`` in
                     two fp32 accumulators, activation-and-multiply fused, stored per pair ``[P, I]``.
  4. ``_down``       one launch: ``inter[pair] @ w2[e].T``, times the pair's routing weight, stored per pair.
  5. ``_combine``    one program per (token, column block): sums the token's valid slots in fp32, rounds once.
  (Small batches may take the pair path instead: see below.)

Buffers are sized by the worst case (``P + min(P, E) * (BLOCK_M - 1)`` padded rows); row blocks past the actual
padded count exit at once, so the grid does not depend on the routing. The combine step is a separate launch rather
than atomics into the output: it keeps the result deterministic and needs no zero-fill.

Rounding mirrors the torch reference (HF ``experts_implementation="grouped_mm"``): gate/up and the expert output are
rounded to the model dtype like ``F.linear``'s outputs, the activation is rounded before the multiply, the weighted
product is rounded to ``promote(hidden dtype, weight dtype)``, the k products are summed in fp32 and rounded once.
fp32 models run the dots in IEEE fp32 (not tf32) so the GPU engine matches transformers' fp32 greedy tokens.

Block sizes come from a small table keyed by the average rows per expert (after vLLM's tuned H200 table for
E=128, N=768, with the gate-up column block halved because each program here computes gate and up columns).
Up to ``SMALL_T`` tokens a second path competes: no sorting, one GEMV program per (pair, column block), the combine
done by the last arriving program of the down launch (three launches with the router instead of five); the faster
of the two is timed once per shape, as ``linear.py`` does for the dense skinny GEMMs. ``config=`` overrides both
(``bench/moe.py`` sweeps alternatives).
"""
from __future__ import annotations


import torch
import triton
import triton.language as tl

from modelgen import settings

from ...ops.gpu import next_pow2, pdl

# ----------------------------------------------------------------------------------------------------------- router


@triton.jit
def _route_row(
    lrow_ptr, bias_ptr, wrow_ptr, idrow_ptr, scaling,
    NG: tl.constexpr, PG: tl.constexpr, BG: tl.constexpr, BP: tl.constexpr,
    TOPK: tl.constexpr, BK: tl.constexpr, TOPK_GROUP: tl.constexpr,
    SIGMOID: tl.constexpr, HAS_BIAS: tl.constexpr, RENORM: tl.constexpr, TOPK_SOFTMAX: tl.constexpr = False,
    SHARED_GATE: tl.constexpr = False,
):
    """One token: logits row -> its top-k weights and expert ids. ``TOPK_SOFTMAX`` (GPT-OSS): top-k of the raw
    logits, then a softmax over the k selected logits rounded to the logits' dtype (HF softmax(dtype=logits dtype)).
    ``SHARED_GATE`` (Qwen3-Next's gated shared expert as slot E, runtime/layers/moe/shared_slot.py): the row holds
    E + 1 logits, the last one the shared_expert_gate's; routing uses the first E, and column TOPK gets id E and
    weight sigmoid(logit E) rounded to the logits' dtype (HF: F.sigmoid(shared_expert_gate(x)) in the model dtype)."""
    # Experts laid out as [group, expert-in-group] = [NG, PG] (NG = 1 without group-limited routing).
    g = tl.arange(0, BG)[:, None]
    p = tl.arange(0, BP)[None, :]
    valid = (g < NG) & (p < PG)
    e = g * PG + p
    logit = tl.load(lrow_ptr + e, mask=valid, other=0.0).to(tl.float32)
    if TOPK_SOFTMAX:
        scores = logit
        choice = logit
    elif SIGMOID:
        scores = 1.0 / (1.0 + tl.exp(-logit))
        choice = scores
        if HAS_BIAS:  # correction bias steers the selection only; the weights are the unbiased scores
            choice = choice + tl.load(bias_ptr + e, mask=valid, other=0.0).to(tl.float32)
    else:
        m = tl.max(tl.max(tl.where(valid, logit, float("-inf")), 1), 0)
        ex = tl.where(valid, tl.exp(logit - m), 0.0)
        scores = ex / tl.sum(tl.sum(ex, 1), 0)
        choice = scores
    choice = tl.where(valid, choice, float("-inf"))
    if NG > 1:
        # Group score = sum of the two best (biased) scores in the group (HF: topk(2).sum); keep TOPK_GROUP groups.
        best = tl.max(choice, 1)
        first = tl.argmax(choice, 1)
        second = tl.max(tl.where(p == first[:, None], float("-inf"), choice), 1)
        gi = tl.arange(0, BG)
        gscore = tl.where(gi < NG, best + second, float("-inf"))
        keep = gi < 0
        for _ in tl.static_range(TOPK_GROUP):
            pick = tl.argmax(gscore, 0)
            keep = keep | (gi == pick)
            gscore = tl.where(gi == pick, float("-inf"), gscore)
        choice = tl.where(keep[:, None], choice, float("-inf"))
    flat = tl.reshape(choice, (BG * BP,))
    flat_scores = tl.reshape(scores, (BG * BP,))
    pos = tl.arange(0, BG * BP)
    kk = tl.arange(0, BK)
    w = tl.zeros((BK,), tl.float32)
    ids = tl.zeros((BK,), tl.int32)
    for i in tl.static_range(TOPK):
        top = tl.argmax(flat, 0)
        wi = tl.sum(tl.where(pos == top, flat_scores, 0.0), 0)
        w = tl.where(kk == i, wi, w)
        ids = tl.where(kk == i, ((top // BP) * PG + top % BP).to(tl.int32), ids)
        flat = tl.where(pos == top, float("-inf"), flat)
    if TOPK_SOFTMAX:  # the selected logits come in descending order: the first is the maximum
        ex = tl.where(kk < TOPK, tl.exp(w - tl.max(tl.where(kk < TOPK, w, float("-inf")), 0)), 0.0)
        w = (ex / tl.sum(ex, 0)).to(lrow_ptr.dtype.element_ty).to(tl.float32)
    if RENORM:
        total = tl.sum(w, 0)
        if SIGMOID:
            total += 1e-20  # HF's DeepSeek/GLM routers add this epsilon; the softmax routers do not
        w = w / total
    w = w * scaling
    kmask = kk < TOPK
    tl.store(wrow_ptr + kk, w.to(wrow_ptr.dtype.element_ty), mask=kmask)
    tl.store(idrow_ptr + kk, ids, mask=kmask)
    if SHARED_GATE:
        glogit = tl.load(lrow_ptr + NG * PG).to(tl.float32)
        gw = (1.0 / (1.0 + tl.exp(-glogit))).to(lrow_ptr.dtype.element_ty).to(tl.float32)
        tl.store(wrow_ptr + TOPK, gw.to(wrow_ptr.dtype.element_ty))
        tl.store(idrow_ptr + TOPK, tl.full((), NG * PG, tl.int32))


@triton.jit
def _route_kernel(
    logits_ptr, bias_ptr, w_ptr, ids_ptr, s_l, scaling,
    NG: tl.constexpr, PG: tl.constexpr, BG: tl.constexpr, BP: tl.constexpr,
    TOPK: tl.constexpr, BK: tl.constexpr, TOPK_GROUP: tl.constexpr,
    SIGMOID: tl.constexpr, HAS_BIAS: tl.constexpr, RENORM: tl.constexpr, TOPK_SOFTMAX: tl.constexpr,
    PDL: tl.constexpr, SHARED_GATE: tl.constexpr = False, KOUT: tl.constexpr = 0,
):
    """One program per token; ``KOUT``: columns of the weight / id rows (TOPK, or TOPK + 1 with SHARED_GATE)."""
    pdl.wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    _route_row(logits_ptr + row * s_l, bias_ptr, w_ptr + row * KOUT, ids_ptr + row * KOUT, scaling,
               NG, PG, BG, BP, TOPK, BK, TOPK_GROUP, SIGMOID, HAS_BIAS, RENORM, TOPK_SOFTMAX, SHARED_GATE)


@triton.jit
def _router_topk_kernel(
    x_ptr, rw_ptr, logits_ptr, bias_ptr, w_ptr, ids_ptr, cnt_ptr, T, E, H, s_xm, s_rw, scaling,
    BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr,
    NG: tl.constexpr, PG: tl.constexpr, BG: tl.constexpr, BP: tl.constexpr,
    TOPK: tl.constexpr, BK: tl.constexpr, TOPK_GROUP: tl.constexpr,
    SIGMOID: tl.constexpr, HAS_BIAS: tl.constexpr, RENORM: tl.constexpr, TOPK_SOFTMAX: tl.constexpr,
    PDL: tl.constexpr,
):
    """Router GEMM and top-k in one launch for a few tokens: each program computes the logits of BLOCK_E experts
    (rounded to the activations' dtype, as F.linear returns them); the last to finish (an acq_rel counter, reset
    afterwards for graph replay) routes every token."""
    pid = tl.program_id(0)
    pdl.wait(PDL)
    offs_t = tl.arange(0, 16)  # tokens padded to a tensor-core tile (T <= 16)
    offs_e = pid * BLOCK_E + tl.arange(0, BLOCK_E)
    offs_k = tl.arange(0, BLOCK_K)
    tmask = offs_t < T
    emask = offs_e < E
    acc = tl.zeros((16, BLOCK_E), tl.float32)
    for k0 in range(0, H, BLOCK_K):
        kmask = (k0 + offs_k) < H
        x = tl.load(x_ptr + offs_t[:, None] * s_xm + (k0 + offs_k)[None, :], mask=tmask[:, None] & kmask[None, :],
                    other=0.0)
        w = tl.load(rw_ptr + offs_e[:, None] * s_rw + (k0 + offs_k)[None, :], mask=emask[:, None] & kmask[None, :],
                    other=0.0)
        if IEEE:
            acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, tl.trans(w), acc)
    acc = acc.to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(logits_ptr + offs_t[:, None] * E + offs_e[None, :], acc, mask=tmask[:, None] & emask[None, :])
    if tl.atomic_add(cnt_ptr, 1, sem="acq_rel") == tl.num_programs(0) - 1:
        for t in range(0, T):
            _route_row(logits_ptr + t * E, bias_ptr, w_ptr + t * TOPK, ids_ptr + t * TOPK, scaling,
                       NG, PG, BG, BP, TOPK, BK, TOPK_GROUP, SIGMOID, HAS_BIAS, RENORM, TOPK_SOFTMAX)
        tl.atomic_xchg(cnt_ptr, 0)


def _route_meta(E: int, top_k: int, scoring: str, renormalize: bool, n_group, topk_group, bias) -> dict:
    grouped = n_group is not None and n_group > 1
    ng = n_group if grouped else 1
    return dict(NG=ng, PG=E // ng, BG=next_pow2(ng), BP=next_pow2(E // ng), TOPK=top_k, BK=max(2, next_pow2(top_k)),
                TOPK_GROUP=int(topk_group or 1), SIGMOID=scoring == "sigmoid", HAS_BIAS=bias is not None,
                RENORM=bool(renormalize) and scoring != "topk_softmax", TOPK_SOFTMAX=scoring == "topk_softmax")


def route(
    logits: torch.Tensor, top_k: int, *, scoring: str, renormalize: bool, n_group: int | None = None,
    topk_group: int | None = None, e_score_correction_bias: torch.Tensor | None = None,
    routed_scaling_factor: float = 1.0, out_dtype: torch.dtype = torch.float32, shared_gate: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``runtime.layers.moe.ops.route`` in one launch -> (weights ``[T, k]`` in ``out_dtype``, ids ``[T, k]`` int32).

    ``shared_gate``: ``logits [T, E + 1]``, the last column a shared expert's gate logit; routing over the first E and
    the results get a column k more: id E, weight ``sigmoid(logit E)`` in the logits' dtype (``_route_row``).

    The ids come in descending-score order (the sigmoid reference's ``topk(sorted=False)`` order is unspecified:
    compare ids as sets there). Arguments are validated by the reference's caller (``TopKRouter``).
    ``scoring="topk_softmax"`` (GPT-OSS, granitemoe): top-k of the raw logits, softmax over the k in the logits'
    dtype; ``renormalize`` is ignored (the weights already sum to 1).
    """
    T, E = logits.shape
    E -= int(shared_gate)
    kout = top_k + int(shared_gate)
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    w = torch.empty((T, kout), dtype=out_dtype, device=logits.device)
    ids = torch.empty((T, kout), dtype=torch.int32, device=logits.device)
    if T:
        bias = e_score_correction_bias
        _route_kernel[(T,)](
            logits, bias if bias is not None else logits, w, ids, logits.stride(0), float(routed_scaling_factor),
            **_route_meta(E, top_k, scoring, renormalize, n_group, topk_group, bias), num_warps=4 if E >= 256 else 2,
            SHARED_GATE=bool(shared_gate), KOUT=kout, **pdl.launch(logits.device),
        )
    return w, ids


# Up to this many tokens the router GEMM and the top-k may share one launch. Off (0): measured on the H200 at the
# Qwen3-30B-A3B shape (T = 1, 24 layers' routers, graph replays) it took 9.4 us per layer against 7.2 us for the
# skinny GEMM + top-k kernel: its 8 GEMM programs and the single routing program serialise more than the second
# launch costs. Kept (and tested) for shapes with larger routers.
FUSED_ROUTER_T = 0


def router(
    x: torch.Tensor, weight: torch.Tensor, top_k: int, *, scoring: str, renormalize: bool,
    n_group: int | None = None, topk_group: int | None = None, e_score_correction_bias: torch.Tensor | None = None,
    routed_scaling_factor: float = 1.0, out_dtype: torch.dtype = torch.float32, gemm=None,
    bias: torch.Tensor | None = None, shared_gate: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``route(x @ weight.T + bias, ...)``: for up to ``FUSED_ROUTER_T`` tokens one launch (logits in ``x.dtype`` as
    ``F.linear`` rounds them; no linear bias, not ``topk_softmax``), else ``gemm(x, weight[, bias])`` (default
    ``F.linear``) then ``route``. ``bias``: the router linear's own bias (GPT-OSS), part of the logits.
    ``shared_gate``: ``weight [E + 1, H]``, the last row a shared expert's gate (``route``); always two launches."""
    T, H = x.shape
    E = weight.shape[0]
    kw = dict(scoring=scoring, renormalize=renormalize, n_group=n_group, topk_group=topk_group,
              e_score_correction_bias=e_score_correction_bias, routed_scaling_factor=routed_scaling_factor)
    if not (0 < T <= FUSED_ROUTER_T and x.dtype == weight.dtype and x.stride(-1) == 1 and weight.stride(-1) == 1
            and x.dtype in (torch.bfloat16, torch.float16, torch.float32) and bias is None
            and scoring != "topk_softmax" and not shared_gate):
        args = (x, weight) if bias is None else (x, weight, bias)
        logits = gemm(*args) if gemm is not None else torch.nn.functional.linear(*args)
        return route(logits, top_k, out_dtype=out_dtype, shared_gate=shared_gate, **kw)
    w = torch.empty((T, top_k), dtype=out_dtype, device=x.device)
    ids = torch.empty((T, top_k), dtype=torch.int32, device=x.device)
    logits = torch.empty((T, E), dtype=torch.float32, device=x.device)
    bias = e_score_correction_bias
    block_e = 16
    _router_topk_kernel[(triton.cdiv(E, block_e),)](
        x, weight, logits, bias if bias is not None else logits, w, ids, _counters(x.device, 1, "router"), T, E, H,
        x.stride(0), weight.stride(0), float(routed_scaling_factor),
        BLOCK_E=block_e, BLOCK_K=128 if x.dtype == torch.float32 else 256, IEEE=x.dtype == torch.float32,
        **_route_meta(E, top_k, scoring, renormalize, n_group, topk_group, bias), num_warps=4, num_stages=3,
        **pdl.launch(x.device),
    )
    return w, ids


# -------------------------------------------------------------------------------------------------------- alignment


@triton.jit
def _pair_slot(ids_ptr, s_ids, t, j, inb, K_ROUTED, expert_offset, L):
    """(local slot, computed on this rank?) of token ``t``'s slot ``j`` (routed slots: this rank's range only)."""
    routed = j < K_ROUTED
    gid = tl.load(ids_ptr + t * s_ids + j, mask=inb & routed, other=0).to(tl.int32)
    loc = tl.where(routed, gid - expert_offset, L + (j - K_ROUTED))
    return loc, inb & (~routed | ((loc >= 0) & (loc < L)))


@triton.jit
def _pair_expert(ids_ptr, s_ids, pidx, P, KT, K_ROUTED, expert_offset, L):
    """Local slot of pair ``pidx`` (token ``pidx // KT``, slot ``pidx % KT``) and whether this rank computes it."""
    return _pair_slot(ids_ptr, s_ids, (pidx // KT).to(tl.int64), pidx % KT, pidx < P, K_ROUTED, expert_offset, L)


@triton.jit
def _align_kernel(
    ids_ptr, sorted_ptr, expert_ids_ptr, npost_ptr, cursor_ptr,
    s_ids, P, KT, K_ROUTED, expert_offset, L, NSLOTS, max_padded, max_blocks,
    BLOCK_M: tl.constexpr, NB: tl.constexpr, CHUNK: tl.constexpr, CHUNK_B: tl.constexpr, PDL: tl.constexpr,
):
    pdl.wait(PDL)
    ar = tl.arange(0, CHUNK)
    bins = tl.arange(0, NB)
    counts = tl.zeros((NB,), tl.int32)
    for start in range(0, P, CHUNK):
        loc, ok = _pair_expert(ids_ptr, s_ids, start + ar, P, KT, K_ROUTED, expert_offset, L)
        counts += tl.histogram(tl.where(ok, loc, NB - 1), NB)  # bin NB - 1 >= NSLOTS collects the dropped pairs
    counts = tl.where(bins < NSLOTS, counts, 0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    incl = tl.cumsum(padded, 0)
    total = tl.sum(padded, 0)
    tl.store(npost_ptr, total)
    tl.store(cursor_ptr + bins, incl - padded)
    for start in range(0, max_padded, CHUNK):  # padding rows point past the last pair: masked in the GEMMs
        tl.store(sorted_ptr + start + ar, P, mask=start + ar < max_padded)
    arb = tl.arange(0, CHUNK_B)
    # Each expert writes its own blocks [excl / BLOCK_M, incl / BLOCK_M), one block per expert a pass (as many passes
    # as the fullest expert has blocks); the blocks past the padded total get -1. Disjoint addresses. (Measured
    # against a per-block count of the experts ending before it: 8.4 vs 32.6 us a call at Qwen3-Next's bs32.)
    for start in range(0, max_blocks, CHUNK_B):
        blk = start + arb
        tl.store(expert_ids_ptr + blk, -1, mask=(blk < max_blocks) & (blk * BLOCK_M >= total))
    nblk = padded // BLOCK_M
    first_blk = (incl - padded) // BLOCK_M
    for j in range(0, tl.max(nblk, 0)):
        tl.store(expert_ids_ptr + first_blk + j, bins, mask=j < nblk)
    tl.debug_barrier()  # the cursors and the padding fill are visible to every thread before the scatter
    for start in range(0, P, CHUNK):
        loc, ok = _pair_expert(ids_ptr, s_ids, start + ar, P, KT, K_ROUTED, expert_offset, L)
        dst = tl.atomic_add(cursor_ptr + loc, 1, mask=ok)  # order within an expert is irrelevant: rows independent
        tl.store(sorted_ptr + dst, start + ar, mask=ok)


def padded_rows(num_pairs: int, num_slots: int, block_m: int) -> int:
    """Worst-case length of the expert-sorted row list: each of at most ``min(P, slots)`` used experts wastes
    ``< BLOCK_M`` rows of padding."""
    worst = num_pairs + min(num_pairs, num_slots) * (block_m - 1)
    return triton.cdiv(worst, block_m) * block_m


# ---------------------------------------------------------------------------------------------------------- GEMMs


@triton.jit
def _act(gate, GELU: tl.constexpr):
    """silu(gate), or gelu with the tanh approximation, in fp32."""
    if GELU:
        c: tl.constexpr = 0.7978845608028654  # sqrt(2 / pi)
        inner = c * (gate + 0.044715 * gate * gate * gate)
        ex = tl.exp(-2.0 * tl.abs(inner))
        th = (1.0 - ex) / (1.0 + ex)
        return 0.5 * gate * (1.0 + tl.where(inner >= 0, th, -th))
    return gate / (1.0 + tl.exp(-gate))


@triton.jit
def _gated(gate, up, dt: tl.constexpr, alpha, limit, GELU: tl.constexpr, SWIGLU: tl.constexpr):
    """The gated activation of fp32 ``gate`` / ``up`` (already rounded to ``dt`` as ``F.linear``'s outputs) -> ``dt``.
    ``SWIGLU``: GPT-OSS's clamped SwiGLU (``runtime/ops/activation.py`` ``clamped_swiglu``), ``(clamp(up, -l, l) + 1)
    * g * sigmoid(alpha g)`` with ``g = min(gate, l)``, rounded to ``dt`` at each of the torch expression's steps
    (``gate * alpha``, the sigmoid, ``gate * sigmoid``, ``up + 1``, the product); otherwise ``act(gate) * up``
    (silu or gelu_tanh). Shared by the bf16 kernels here and the MXFP4 ones (``moe_mxfp4.py``)."""
    if SWIGLU:
        g = tl.minimum(gate, limit)
        u = tl.minimum(tl.maximum(up, -limit), limit)
        ga = (g * alpha).to(dt).to(tl.float32)
        sig = (1.0 / (1.0 + tl.exp(-ga))).to(dt).to(tl.float32)
        glu = (g * sig).to(dt).to(tl.float32)
        h = ((u + 1.0).to(dt).to(tl.float32) * glu).to(dt)
    else:
        h = (_act(gate, GELU).to(dt).to(tl.float32) * up).to(dt)
    return h


@triton.jit
def _tile(expert_ids_ptr, sorted_ptr, pid_m, pid_n, P, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Expert, pair ids (int64) and masks of row block ``pid_m`` / column block ``pid_n`` of the sorted list."""
    e = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    rows = tl.load(sorted_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    return e, rows.to(tl.int64), rows < P, offs_n, offs_n < N


@triton.jit
def _row_block(npost_ptr, BLOCK_M: tl.constexpr, PDL: tl.constexpr):
    """(column block, row block, whether the row block lies past the padded row count): the sorted-list GEMMs' grid
    has the worst-case number of row blocks, the ones past the count the align launch wrote exit at once (the caller
    returns: a helper cannot). ``PDL``: wait for that launch before reading its count (nothing when off)."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pdl.wait(PDL)
    return pid_n, pid_m, pid_m * BLOCK_M >= tl.load(npost_ptr)


@triton.jit
def _gate_up_store(acc_g, acc_u, out_ptr, rows, rmask, offs_n, nmask, s_om, N, b_ptr, e, s_be, alpha, limit,
                   HAS_BIAS: tl.constexpr, GELU: tl.constexpr, SWIGLU: tl.constexpr):
    """Gate-up epilogue of the sorted-list kernels (bf16 / FP8 / MXFP4 weights): the optional stacked bias ``[E, 2I]``
    (FusedMoE.w13_bias: gate columns then up columns) added in fp32 before ``F.linear``'s one output rounding, the
    gated activation (``_gated``), the store per pair row."""
    dt = out_ptr.dtype.element_ty
    if HAS_BIAS:
        acc_g += tl.load(b_ptr + e * s_be + offs_n, mask=nmask, other=0.0).to(tl.float32)[None, :]
        acc_u += tl.load(b_ptr + e * s_be + N + offs_n, mask=nmask, other=0.0).to(tl.float32)[None, :]
    gate = acc_g.to(dt).to(tl.float32)  # F.linear's output rounding
    up = acc_u.to(dt).to(tl.float32)
    h = _gated(gate, up, dt, alpha, limit, GELU, SWIGLU)
    tl.store(out_ptr + rows[:, None] * s_om + offs_n[None, :], h, mask=rmask[:, None] & nmask[None, :])


@triton.jit
def _down_store(acc, dt: tl.constexpr, out_ptr, rows, rmask, offs_n, nmask, s_om, tw_ptr, s_tw, KT, K_ROUTED,
                b_ptr, e, s_be, HAS_BIAS: tl.constexpr, SHARED: tl.constexpr):
    """Down epilogue of the sorted-list kernels: the optional bias ``[E, H]`` (w2_bias) inside ``F.linear``'s one
    rounding, the expert output rounded to the model dtype ``dt``, times the pair's routing weight in fp32, stored in
    ``out_ptr``'s dtype (``promote(model dtype, weight dtype)``). ``SHARED``: slots ``j >= K_ROUTED`` are shared
    experts and weigh 1 (no routing weight stored for them); off, every slot is routed."""
    if HAS_BIAS:
        acc += tl.load(b_ptr + e * s_be + offs_n, mask=nmask, other=0.0).to(tl.float32)[None, :]
    y = acc.to(dt).to(tl.float32)  # the expert's output in the model dtype
    t = rows // KT
    j = rows % KT
    if SHARED:
        routed = j < K_ROUTED
        wt = tl.load(tw_ptr + t * s_tw + j, mask=rmask & routed, other=1.0).to(tl.float32)
        wt = tl.where(routed, wt, 1.0)  # shared-expert slots weigh 1
    else:
        wt = tl.load(tw_ptr + t * s_tw + j, mask=rmask, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * s_om + offs_n[None, :], (y * wt[:, None]).to(out_ptr.dtype.element_ty),
             mask=rmask[:, None] & nmask[None, :])


@triton.jit
def _gate_up_kernel(
    x_ptr, w_ptr, out_ptr, sorted_ptr, expert_ids_ptr, npost_ptr, b_ptr,
    N, K, KT, P, s_xm, s_we, s_wn, s_om, s_be, alpha, limit,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    GELU: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr, HAS_BIAS: tl.constexpr = False,
    SWIGLU: tl.constexpr = False,
):
    pid_n, pid_m, done = _row_block(npost_ptr, BLOCK_M, PDL)  # the row list comes from the align launch just before
    if done:
        return
    e, rows, rmask, offs_n, nmask = _tile(expert_ids_ptr, sorted_ptr, pid_m, pid_n, P, N, BLOCK_M, BLOCK_N)
    tok = rows // KT
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = x_ptr + tok[:, None] * s_xm + offs_k[None, :]
    g_ptrs = w_ptr + e * s_we + offs_n.to(tl.int64)[:, None] * s_wn + offs_k[None, :]
    u_ptrs = g_ptrs + N * s_wn  # up rows follow the I gate rows
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=rmask[:, None], other=0.0)
            wg = tl.load(g_ptrs, mask=nmask[:, None], other=0.0)
            wu = tl.load(u_ptrs, mask=nmask[:, None], other=0.0)
        else:
            kmask = (k0 + offs_k) < K
            a = tl.load(a_ptrs, mask=rmask[:, None] & kmask[None, :], other=0.0)
            wg = tl.load(g_ptrs, mask=nmask[:, None] & kmask[None, :], other=0.0)
            wu = tl.load(u_ptrs, mask=nmask[:, None] & kmask[None, :], other=0.0)
        if IEEE:
            acc_g = tl.dot(a, tl.trans(wg), acc_g, input_precision="ieee")
            acc_u = tl.dot(a, tl.trans(wu), acc_u, input_precision="ieee")
        else:
            acc_g = tl.dot(a, tl.trans(wg), acc_g)
            acc_u = tl.dot(a, tl.trans(wu), acc_u)
        a_ptrs += BLOCK_K
        g_ptrs += BLOCK_K
        u_ptrs += BLOCK_K
    _gate_up_store(acc_g, acc_u, out_ptr, rows, rmask, offs_n, nmask, s_om, N, b_ptr, e, s_be, alpha, limit,
                   HAS_BIAS, GELU, SWIGLU)


@triton.jit
def _down_kernel(
    a_ptr, w_ptr, out_ptr, sorted_ptr, expert_ids_ptr, npost_ptr, tw_ptr, b_ptr,
    N, K, KT, K_ROUTED, P, s_am, s_we, s_wn, s_om, s_tw, s_be,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    IEEE: tl.constexpr, PDL: tl.constexpr, HAS_BIAS: tl.constexpr = False,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    live = pid_m * BLOCK_M < tl.load(npost_ptr)  # the align launch (two back) wrote these: readable before the wait
    pdl.wait(PDL)
    if not live:
        return
    e, rows64, rmask, offs_n, nmask = _tile(expert_ids_ptr, sorted_ptr, pid_m, pid_n, P, N, BLOCK_M, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows64[:, None] * s_am + offs_k[None, :]
    w_ptrs = w_ptr + e * s_we + offs_n.to(tl.int64)[:, None] * s_wn + offs_k[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=rmask[:, None], other=0.0)
            w = tl.load(w_ptrs, mask=nmask[:, None], other=0.0)
        else:
            kmask = (k0 + offs_k) < K
            a = tl.load(a_ptrs, mask=rmask[:, None] & kmask[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=nmask[:, None] & kmask[None, :], other=0.0)
        if IEEE:
            acc = tl.dot(a, tl.trans(w), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, tl.trans(w), acc)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    _down_store(acc, a_ptr.dtype.element_ty, out_ptr, rows64, rmask, offs_n, nmask, s_om, tw_ptr, s_tw, KT, K_ROUTED,
                b_ptr, e, s_be, HAS_BIAS, True)


@triton.jit
def _combine_kernel(
    pair_ptr, ids_ptr, out_ptr, H, KT, K_ROUTED, expert_offset, L, s_ids, s_pair, s_out,
    BKT: tl.constexpr, BLOCK_H: tl.constexpr, PDL: tl.constexpr,
):
    pdl.wait(PDL)
    t = tl.program_id(0).to(tl.int64)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = offs_h < H
    j = tl.arange(0, BKT)
    routed = j < K_ROUTED
    gid = tl.load(ids_ptr + t * s_ids + j, mask=routed, other=0).to(tl.int32)
    loc = gid - expert_offset
    ok = (j < KT) & (~routed | ((loc >= 0) & (loc < L)))  # pairs this rank computed; others were never written
    vals = tl.load(pair_ptr + (t * KT + j)[:, None] * s_pair + offs_h[None, :], mask=ok[:, None] & hmask[None, :],
                   other=0.0)
    tl.store(out_ptr + t * s_out + offs_h, tl.sum(vals.to(tl.float32), 0).to(out_ptr.dtype.element_ty), mask=hmask)


# ------------------------------------------------------------------------------------- small batches: one row a pair
# At a few tokens (decode at batch 1-4) the pairs almost surely hit distinct experts: sorting buys nothing, while the
# one-program align launch and the separate combine launch cost more than the GEMMs take beyond their byte-time.
# Here gate-up runs one program per (column block, pair) as a GEMV, and down one program per (column block, pair)
# whose last arrival per (token, column block) (an acq_rel counter, as linear.py's split-K GEMV) sums the token's
# slots in slot order and resets the counter: two launches after the router instead of four, the same rounding
# steps as the sorted path, deterministic, and safe to replay from a CUDA graph.


@triton.jit
def _gate_up_pairs_kernel(
    x_ptr, w_ptr, out_ptr, ids_ptr, N, K, KT, K_ROUTED, expert_offset, L, s_ids, s_xm, s_we, s_wn,
    s_om, b_ptr, s_be, alpha, limit, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GELU: tl.constexpr,
    PDL: tl.constexpr, PF_DIST: tl.constexpr = 0, HAS_BIAS: tl.constexpr = False, SWIGLU: tl.constexpr = False,
):
    pdl.wait(PDL)  # the expert ids come from the router launch just before
    _gate_up_pair(x_ptr, w_ptr, out_ptr, ids_ptr, tl.program_id(0), tl.program_id(1).to(tl.int64),
                  N, K, KT, K_ROUTED, expert_offset, L, s_ids, s_xm, s_we, s_wn, s_om,
                  b_ptr, s_be, alpha, limit, BLOCK_N, BLOCK_K, GELU, PF_DIST, HAS_BIAS, SWIGLU)


@triton.jit
def _gate_up_pair(
    x_ptr, w_ptr, out_ptr, ids_ptr, pid_n, pair, N, K, KT, K_ROUTED, expert_offset, L,
    s_ids, s_xm, s_we, s_wn, s_om, b_ptr, s_be, alpha, limit, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GELU: tl.constexpr, PF_DIST: tl.constexpr, HAS_BIAS: tl.constexpr, SWIGLU: tl.constexpr,
):
    """Column block ``pid_n`` of pair ``pair``'s gated activation: ``act(x @ w13[e, gate].T) *
    (x @ w13[e, up].T)`` for the pair's expert ``e``, stored to row ``pair`` of ``out`` (nothing for a slot this
    rank does not compute)."""
    t = pair // KT
    e, ok = _pair_slot(ids_ptr, s_ids, t, pair % KT, pair >= 0, K_ROUTED, expert_offset, L)
    if ok:
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        nmask = offs_n < N
        offs_k = tl.arange(0, BLOCK_K)
        g_ptrs = w_ptr + e.to(tl.int64) * s_we + offs_n.to(tl.int64)[:, None] * s_wn + offs_k[None, :]
        u_ptrs = g_ptrs + N * s_wn
        x_ptrs = x_ptr + t * s_xm + offs_k
        acc_g = tl.zeros((BLOCK_N, BLOCK_K), tl.float32)
        acc_u = tl.zeros((BLOCK_N, BLOCK_K), tl.float32)
        row0 = w_ptr + e.to(tl.int64) * s_we + (pid_n * BLOCK_N).to(tl.int64) * s_wn
        for k0 in range(0, K, BLOCK_K):
            if PF_DIST > 0:  # L2 prefetch of the tile PF_DIST steps ahead: more bytes in flight than registers hold
                kn = k0 + PF_DIST * BLOCK_K
                if kn < K:
                    pdl.prefetch_rows(row0 + kn, s_wn, N - pid_n * BLOCK_N, BLOCK_K, BLOCK_N, 1)
                    pdl.prefetch_rows(row0 + N * s_wn + kn, s_wn, N - pid_n * BLOCK_N, BLOCK_K, BLOCK_N, 1)
            kmask = (k0 + offs_k) < K
            x = tl.load(x_ptrs, mask=kmask, other=0.0).to(tl.float32)[None, :]
            m = nmask[:, None] & kmask[None, :]
            acc_g += tl.load(g_ptrs, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32) * x
            acc_u += tl.load(u_ptrs, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32) * x
            g_ptrs += BLOCK_K
            u_ptrs += BLOCK_K
            x_ptrs += BLOCK_K
        dt = out_ptr.dtype.element_ty
        # gate columns then up columns of w13_bias [E, 2I], before F.linear's rounding
        gate = tl.sum(acc_g, 1)
        if HAS_BIAS:
            gate += tl.load(b_ptr + e.to(tl.int64) * s_be + offs_n, mask=nmask, other=0.0).to(tl.float32)
        gate = gate.to(dt).to(tl.float32)
        up = tl.sum(acc_u, 1)
        if HAS_BIAS:
            up += tl.load(b_ptr + e.to(tl.int64) * s_be + N + offs_n, mask=nmask, other=0.0).to(tl.float32)
        up = up.to(dt).to(tl.float32)
        tl.store(out_ptr + pair * s_om + offs_n, _gated(gate, up, dt, alpha, limit, GELU, SWIGLU), mask=nmask)


@triton.jit
def _expert_gemv(a_ptr, w_ptr, offs_n, nmask, K, s_wn, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, b_ptr=None,
                 HAS_BIAS: tl.constexpr = False):
    """``w[offs_n, :K] @ a[:K] (+ b[offs_n])`` for one expert's matrix ``w`` (and bias row ``b``) and one pair's
    activations ``a``, rounded to the model dtype (``a``'s) as ``F.linear`` rounds the expert's output; in fp32."""
    offs_k = tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + offs_n.to(tl.int64)[:, None] * s_wn + offs_k[None, :]
    a_ptrs = a_ptr + offs_k
    acc = tl.zeros((BLOCK_N, BLOCK_K), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kmask = (k0 + offs_k) < K
        a = tl.load(a_ptrs, mask=kmask, other=0.0).to(tl.float32)[None, :]
        acc += tl.load(w_ptrs, mask=nmask[:, None] & kmask[None, :], other=0.0,
                       eviction_policy="evict_first").to(tl.float32) * a
        w_ptrs += BLOCK_K
        a_ptrs += BLOCK_K
    y = tl.sum(acc, 1)
    if HAS_BIAS:
        y += tl.load(b_ptr + offs_n, mask=nmask, other=0.0).to(tl.float32)
    return y.to(a_ptr.dtype.element_ty).to(tl.float32)


@triton.jit
def _down_pairs_kernel(
    a_ptr, w_ptr, pair_ptr, out_ptr, ids_ptr, tw_ptr, cnt_ptr, N, K, KT, K_ROUTED, expert_offset, L,
    s_ids, s_tw, s_am, s_we, s_wn, s_pair, s_out, b_ptr, s_be,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr, HAS_BIAS: tl.constexpr = False,
):
    pid_n = tl.program_id(0)
    pair = tl.program_id(1).to(tl.int64)
    t = pair // KT
    j = pair % KT
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = offs_n < N
    # The expert ids come from the router (two launches back): readable before the wait.
    e, ok = _pair_slot(ids_ptr, s_ids, t, j, pair >= 0, K_ROUTED, expert_offset, L)
    pdl.wait(PDL)
    if ok:
        y = _expert_gemv(a_ptr + pair * s_am, w_ptr + e.to(tl.int64) * s_we, offs_n, nmask, K, s_wn, BLOCK_N, BLOCK_K,
                         b_ptr + e.to(tl.int64) * s_be, HAS_BIAS)
        wt = tl.load(tw_ptr + t * s_tw + j, mask=j < K_ROUTED, other=1.0).to(tl.float32)
        tl.store(pair_ptr + pair * s_pair + offs_n, (y * wt).to(pair_ptr.dtype.element_ty), mask=nmask)
    # Every slot arrives (computed or not); the last one for this (token, column block) sums them in slot order.
    cnt = cnt_ptr + t * tl.num_programs(0) + pid_n
    if tl.atomic_add(cnt, 1, sem="acq_rel") == KT - 1:
        total = tl.zeros((BLOCK_N,), tl.float32)
        for jj in range(0, KT):
            _, okj = _pair_slot(ids_ptr, s_ids, t, jj, pair >= 0, K_ROUTED, expert_offset, L)
            total += tl.load(pair_ptr + (t * KT + jj) * s_pair + offs_n, mask=nmask & okj, other=0.0,
                             cache_modifier=".cg").to(tl.float32)
        tl.store(out_ptr + t * s_out + offs_n, total.to(out_ptr.dtype.element_ty), mask=nmask)
        tl.atomic_xchg(cnt, 0)


@triton.jit
def _down_slots_kernel(
    a_ptr, w_ptr, out_ptr, ids_ptr, tw_ptr, N, K, KT, K_ROUTED, expert_offset, L, s_ids, s_tw, s_am, s_we, s_wn,
    s_out, b_ptr, s_be, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BKT: tl.constexpr, PAIR_FP32: tl.constexpr,
    PDL: tl.constexpr, HAS_BIAS: tl.constexpr = False,
):
    """Down GEMV of all of one token's slots in one program per (column block, token): the ``BKT * BLOCK_N`` rows
    (slot j, column n) of its experts' ``w2`` stream as one tile per K step, and the slots are summed in registers:
    no per-pair buffer, no arrival counter, no last-arrival tail. The same rounding steps as ``_down_pairs_kernel``
    (expert output in the model dtype, times the routing weight rounded to the pair dtype, fp32 sum in slot order,
    rounded once); only the fp32 dot products may associate differently (another tile shape), so the two agree to
    the last bit of the model dtype at most; which is faster is timed."""
    pid_n = tl.program_id(0)
    t = tl.program_id(1).to(tl.int64)
    pdl.wait(PDL)
    tile = _down_slots_first(ids_ptr, w_ptr, a_ptr, t, pid_n, N, K, KT, K_ROUTED, expert_offset, L, s_ids, s_am, s_we,
                             s_wn, BLOCK_N, BLOCK_K, BKT)
    _down_slots_rest(tile, out_ptr, tw_ptr, b_ptr, t, N, K, K_ROUTED, s_tw, s_be, s_out, BLOCK_N, BLOCK_K, BKT,
                     PAIR_FP32, HAS_BIAS)


@triton.jit
def _down_slots_first(ids_ptr, w_ptr, a_ptr, t, pid_n, N, K, KT, K_ROUTED, expert_offset, L, s_ids, s_am, s_we, s_wn,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BKT: tl.constexpr):
    """Program (column block ``pid_n``, token ``t``)'s [slot, column, k] tiles -- the weight rows of every slot's
    expert at once, the activations once per slot -- and its first weight tile, loaded. Reads the router's ids and
    weights only (never written by the chain's kernels), so it may run before waiting for the activations."""
    js = tl.arange(0, BKT)
    e, ok = _pair_slot(ids_ptr, s_ids, t, js, js < KT, K_ROUTED, expert_offset, L)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    w_rows = (w_ptr + e.to(tl.int64)[:, None, None] * s_we + offs_n.to(tl.int64)[None, :, None] * s_wn
              + offs_k[None, None, :])
    a_rows = a_ptr + (t * KT + js)[:, None, None] * s_am + offs_k[None, None, :]
    wmask = ok[:, None, None] & nmask[None, :, None]
    w0 = tl.load(w_rows, mask=wmask & (offs_k < K)[None, None, :], other=0.0, eviction_policy="evict_first")
    return js, e, ok, offs_n, nmask, w_rows, a_rows, wmask, w0


@triton.jit
def _down_slots_rest(tile, out_ptr, tw_ptr, b_ptr, t, N, K, K_ROUTED, s_tw, s_be, s_out, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, BKT: tl.constexpr, PAIR_FP32: tl.constexpr, HAS_BIAS: tl.constexpr):
    """The rest of :func:`_down_slots_first`'s program: the K loop (the activations read at L2, ``.cg``, as in the
    measured default), each slot's expert output rounded, weighted, and the slots summed in slot order into the
    token's output columns."""
    js, e, ok, offs_n, nmask, w_rows, a_rows, wmask, w0 = tile
    offs_k = tl.arange(0, BLOCK_K)
    a0 = tl.load(a_rows, mask=ok[:, None, None] & (offs_k < K)[None, None, :], other=0.0, cache_modifier=".cg")
    acc = tl.zeros((BKT, BLOCK_N, BLOCK_K), tl.float32) + w0.to(tl.float32) * a0.to(tl.float32)  # the first K step
    for k0 in range(BLOCK_K, K, BLOCK_K):
        w_rows += BLOCK_K
        a_rows += BLOCK_K
        kmask = (k0 + offs_k < K)[None, None, :]
        a = tl.load(a_rows, mask=ok[:, None, None] & kmask, other=0.0, cache_modifier=".cg").to(tl.float32)
        acc += tl.load(w_rows, mask=wmask & kmask, other=0.0, eviction_policy="evict_first").to(tl.float32) * a
    y = tl.sum(acc, 2)
    if HAS_BIAS:  # each slot's expert's row of w2_bias [E, H]
        y += tl.load(b_ptr + e.to(tl.int64)[:, None] * s_be + offs_n[None, :], mask=ok[:, None] & nmask[None, :],
                     other=0.0).to(tl.float32)
    y = y.to(a_rows.dtype.element_ty).to(tl.float32)  # [slot, column]: each expert's output, model dtype
    wt = tl.load(tw_ptr + t * s_tw + js, mask=ok & (js < K_ROUTED), other=1.0).to(tl.float32)
    prod = y * wt[:, None]
    if not PAIR_FP32:
        prod = prod.to(a_rows.dtype.element_ty).to(tl.float32)
    prod = tl.where(ok[:, None], prod, 0.0)
    slot = js[:, None]
    total = tl.zeros((BLOCK_N,), tl.float32)
    for jj in tl.static_range(BKT):  # slot order, one slot at a time (picking one row of prod is exact)
        total += tl.sum(tl.where(slot == jj, prod, 0.0), 0)
    tl.store(out_ptr + t * s_out + offs_n, total.to(out_ptr.dtype.element_ty), mask=nmask)


_COUNTERS: dict[tuple, torch.Tensor] = {}


def _counters(device: torch.device, n: int, purpose: str = "down") -> torch.Tensor:
    """Arrival counters, zero between calls (each call's last arrivals reset theirs). One buffer per (purpose, size),
    never replaced: captured graphs keep pointing at it. Allocated by the eager warm-up before any capture."""
    key = (device, purpose, n)
    buf = _COUNTERS.get(key)
    if buf is None:
        buf = _COUNTERS[key] = torch.zeros(n, dtype=torch.int32, device=device)
    return buf


# ---------------------------------------------------------------------------------------------------------- configs
# (BLOCK_M, gate-up (BLOCK_N, BLOCK_K, warps, stages), down (BLOCK_N, BLOCK_K, warps, stages)), by average rows per
# expert slot. Decode (a few rows per expert) streams weights: narrow column blocks give every SM work; prefill
# (many rows per expert) is a tiled GEMM.
_TABLE = [
    (4, dict(BLOCK_M=16, up=(32, 128, 4, 4), down=(64, 128, 4, 4))),
    (24, dict(BLOCK_M=16, up=(64, 128, 4, 3), down=(128, 128, 4, 3))),
    (48, dict(BLOCK_M=32, up=(64, 128, 4, 3), down=(128, 64, 4, 3))),
    (192, dict(BLOCK_M=64, up=(64, 64, 4, 3), down=(128, 64, 4, 3))),
    (None, dict(BLOCK_M=128, up=(128, 64, 8, 3), down=(128, 64, 8, 3))),
]


SMALL_T = 4  # up to this many tokens the pair path competes (no align, no combine launch)
_PAIRS = dict(pairs=True, up=(16, 256, 4, 3), down=(32, 256, 4, 3))  # GEMV tiles (BLOCK_N, BLOCK_K, warps, stages)
# Down-projection tiles timed against each other (and the sorted path): a whole K row per load keeps more bytes in
# flight per program when I is small (768 for Qwen3-30B-A3B).
_PAIR_CANDIDATES = [_PAIRS, dict(_PAIRS, down=(8, 1024, 4, 1)), dict(_PAIRS, down=(16, 512, 4, 2)),
                    # one program per (column block, token) over all its slots: no combine tail (_down_slots_kernel)
                    dict(_PAIRS, down=(8, 128, 4, 3), down_slots=True), dict(_PAIRS, down=(4, 256, 4, 3),
                                                                              down_slots=True),
                    dict(_PAIRS, down=(16, 128, 8, 3), down_slots=True), dict(_PAIRS, down=(8, 64, 4, 4),
                                                                               down_slots=True),
                    # gate-up with an L2 prefetch 2 / 4 tiles ahead in its K loop (sm_90)
                    dict(_PAIRS, up_prefetch=2), dict(_PAIRS, up_prefetch=4),
                    dict(_PAIRS, up_prefetch=2, down=(8, 128, 4, 3), down_slots=True)]
_CHOICE: dict[tuple, dict] = {}
TIMINGS: dict[tuple, dict[str, float]] = {}  # (T, slots/token, slots, H, I, dtype) -> {path: ms}, for reports


def default_config(num_tokens: int, slots_per_token: int, num_slots: int, dtype: torch.dtype) -> dict:
    """The block table's entry (sorted path) for this many rows per expert slot."""
    rows_per_expert = num_tokens * slots_per_token / max(1, num_slots)
    for bound, cfg in _TABLE:
        if bound is None or rows_per_expert <= bound:
            break
    cfg = {"BLOCK_M": cfg["BLOCK_M"], "up": cfg["up"], "down": cfg["down"]}
    if dtype == torch.float32:  # twice the bytes per element: halve BLOCK_K to stay inside shared memory
        cfg["up"] = (cfg["up"][0], max(16, cfg["up"][1] // 2), cfg["up"][2], min(3, cfg["up"][3]))
        cfg["down"] = (cfg["down"][0], max(16, cfg["down"][1] // 2), cfg["down"][2], min(3, cfg["down"][3]))
    return cfg


# ---------------------------------------------------------------------------------------------------------- fused op
def supported(hidden: torch.Tensor, w13: torch.Tensor, activation: str) -> bool:
    return (hidden.dtype in (torch.bfloat16, torch.float16, torch.float32) and w13.dtype == hidden.dtype
            and activation in ("silu", "gelu_tanh", "clamped_swiglu") and hidden.shape[-1] >= 16 and w13.shape[1] >= 32)


def slot_sizes(hidden: torch.Tensor, w13: torch.Tensor, topk_ids: torch.Tensor, num_shared: int,
               num_local_experts: int | None) -> tuple[int, int, int, int, int, int]:
    """``(k, S, L, I, KT, P)`` of a fused-MoE call on stacked experts ``w13 [L + S, 2I, H]``: routed slots per token,
    shared slots, this rank's routed experts (default all of ``w13`` but the shared slots), intermediate size, slots
    per token ``k + S`` and (token, slot) pairs ``T * KT``."""
    k = topk_ids.shape[1]
    S = int(num_shared)
    L = (w13.shape[0] - S) if num_local_experts is None else int(num_local_experts)
    KT = k + S
    return k, S, L, w13.shape[1] // 2, KT, hidden.shape[0] * KT


def align(topk_ids: torch.Tensor, P: int, KT: int, k: int, expert_offset: int, L: int, S: int, BM: int, *,
          chain: bool = True):
    """(sorted pair ids, expert id per row block, padded row count [1], number of row blocks): the pairs of this
    rank's ``L`` experts and ``S`` shared slots sorted by slot, each slot's rows padded to a multiple of ``BM``;
    buffers sized for the worst case so the grid does not depend on the routing (``_align_kernel``). ``chain=False``:
    launch-chaining (``PDL``) off, for the quantized-expert kernels (``moe_fp8.py``, ``moe_mxfp4.py``), which do not
    chain with it."""
    max_padded = padded_rows(P, L + S, BM)
    max_blocks = max_padded // BM
    dev = topk_ids.device
    nb = next_pow2(L + S + 1)
    sorted_ids = torch.empty(max_padded, dtype=torch.int32, device=dev)
    expert_ids = torch.empty(max_blocks, dtype=torch.int32, device=dev)
    scratch = torch.empty(1 + nb, dtype=torch.int32, device=dev)  # [padded row count | per-expert cursors]
    _align_kernel[(1,)](
        topk_ids, sorted_ids, expert_ids, scratch[:1], scratch[1:],
        topk_ids.stride(0), P, KT, k, int(expert_offset), L, L + S, max_padded, max_blocks,
        BLOCK_M=BM, NB=nb, CHUNK=1024 if P > 256 else 256, CHUNK_B=128, num_warps=4, **_launch(dev, chain),
    )
    return sorted_ids, expert_ids, scratch[:1], max_blocks



def combine(pair_out: torch.Tensor, topk_ids: torch.Tensor, out: torch.Tensor, KT: int, k: int, expert_offset: int,
            L: int, *, chain: bool = True) -> torch.Tensor:
    """``out[t] = sum`` of token t's weighted pair outputs this rank computed, in fp32, rounded once
    (``_combine_kernel``); ``chain`` as in :func:`align`."""
    T, H = out.shape
    block_h = min(1024, next_pow2(H))
    _combine_kernel[(T, triton.cdiv(H, block_h))](
        pair_out, topk_ids, out, H, KT, k, int(expert_offset), L, topk_ids.stride(0), pair_out.stride(0),
        out.stride(0), BKT=max(2, next_pow2(KT)), BLOCK_H=block_h, num_warps=4, **_launch(out.device, chain),
    )
    return out


def _launch(device: torch.device, chain: bool) -> dict:
    return pdl.launch(device) if chain else {"PDL": False}


def fused_moe(
    hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
    activation: str = "silu", *, expert_offset: int = 0, num_local_experts: int | None = None,
    num_shared: int = 0, config: dict | None = None, stages: int = 4, w13_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None, alpha: float = 1.702, limit: float = 7.0,
) -> torch.Tensor:
    """``sum_j w[t, j] * expert_{ids[t, j]}(hidden[t])`` over this rank's experts -> ``[T, H]`` in ``hidden.dtype``.

    ``w13 [L + S, 2I, H]``, ``w2 [L + S, H, I]``: ``num_local_experts`` (L, default all of ``w13`` but the shared
    slots) routed experts holding global ids ``[expert_offset, expert_offset + L)``, then ``num_shared`` (S) shared
    slots that every token visits with weight 1 (pass 0 on ranks that must not add them). ``topk_ids`` are global.
    ``stages`` < 4 stops after the first 1 (align), 2 (gate-up) or 3 (down) launches: for per-stage profiles only
    (the small-batch path has no align launch and combines inside its down launch).
    ``w13_bias [L + S, 2I]`` (gate columns then up columns) / ``w2_bias [L + S, H]``: GPT-OSS's per-expert biases,
    added before each projection's rounding as ``F.linear(x, w, b)``; ``activation="clamped_swiglu"`` takes
    ``alpha`` / ``limit`` (GPT-OSS 1.702 / 7.0).
    """
    T, H = hidden.shape
    k, S, L, I, KT, P = slot_sizes(hidden, w13, topk_ids, num_shared, num_local_experts)
    out = torch.empty((T, H), dtype=hidden.dtype, device=hidden.device)
    if T == 0:
        return out
    if hidden.stride(-1) != 1:
        hidden = hidden.contiguous()
    if topk_ids.stride(-1) != 1:
        topk_ids = topk_ids.contiguous()
    if topk_weights.stride(-1) != 1:
        topk_weights = topk_weights.contiguous()
    # The bias / clamped-SwiGLU arguments of the GEMM launches; without them the kernels compile as before (the
    # constexprs off, an unused bias pointer).
    act = dict(HAS_BIAS=w13_bias is not None, SWIGLU=activation == "clamped_swiglu", GELU=activation == "gelu_tanh")
    extra = dict(w13_bias=w13_bias, w2_bias=w2_bias, alpha=float(alpha), limit=float(limit))
    cfg = config or _choose(hidden, w13, w2, topk_weights, k, KT, L, S, activation, extra)
    if cfg.get("pairs"):
        return _fused_moe_pairs(hidden, w13, w2, topk_weights, topk_ids, act, extra, out, int(expert_offset), L, k,
                                KT, cfg, stages)
    BM = cfg["BLOCK_M"]
    dev = hidden.device
    sorted_ids, expert_ids, npost, max_blocks = align(topk_ids, P, KT, k, expert_offset, L, S, BM)
    ieee = hidden.dtype == torch.float32
    inter = torch.empty((P, I), dtype=hidden.dtype, device=dev)
    if stages < 2:
        return out
    bn, bk, nw, ns = cfg["up"]
    b13 = w13_bias if w13_bias is not None else inter  # a placeholder pointer when HAS_BIAS is off
    _gate_up_kernel[(triton.cdiv(I, bn), max_blocks)](
        hidden, w13, inter, sorted_ids, expert_ids, npost, b13,
        I, H, KT, P, hidden.stride(0), w13.stride(0), w13.stride(1), inter.stride(0), b13.stride(0), extra["alpha"],
        extra["limit"], BLOCK_M=BM, BLOCK_N=bn, BLOCK_K=bk, EVEN_K=H % bk == 0, IEEE=ieee, **act,
        num_warps=nw, num_stages=ns, **pdl.launch(dev),
    )
    pair_dtype = torch.promote_types(hidden.dtype, topk_weights.dtype)
    pair_out = torch.empty((P, H), dtype=pair_dtype, device=dev)
    if stages < 3:
        return out
    bn, bk, nw, ns = cfg["down"]
    b2 = w2_bias if w2_bias is not None else inter
    _down_kernel[(triton.cdiv(H, bn), max_blocks)](
        inter, w2, pair_out, sorted_ids, expert_ids, npost, topk_weights, b2,
        H, I, KT, k, P, inter.stride(0), w2.stride(0), w2.stride(1), pair_out.stride(0), topk_weights.stride(0),
        b2.stride(0), HAS_BIAS=w2_bias is not None, BLOCK_M=BM, BLOCK_N=bn, BLOCK_K=bk, EVEN_K=I % bk == 0,
        IEEE=ieee, num_warps=nw, num_stages=ns, **pdl.launch(dev),
    )
    if stages < 4:
        return out
    return combine(pair_out, topk_ids, out, KT, k, expert_offset, L)


def _fused_moe_pairs(hidden, w13, w2, topk_weights, topk_ids, act, extra, out, expert_offset, L, k, KT, cfg, stages):
    """The small-batch path (see the kernels' comment): gate-up GEMV per pair, down GEMV per pair + combine."""
    T, H = hidden.shape
    I = w13.shape[1] // 2
    P = T * KT
    dev = hidden.device
    inter = torch.empty((P, I), dtype=hidden.dtype, device=dev)
    if stages < 2:  # no align launch here
        return out
    b13 = extra["w13_bias"] if extra["w13_bias"] is not None else inter  # a placeholder pointer without biases
    b2 = extra["w2_bias"] if extra["w2_bias"] is not None else inter
    has_b2 = extra["w2_bias"] is not None
    pair_dtype = torch.promote_types(hidden.dtype, topk_weights.dtype)
    bn, bk, nw, ns = cfg["up"]
    # in-loop prefetch distance (sm_90, 16-byte aligned rows and tiles); the candidates that set it are timed
    pf_dist = int(cfg.get("up_prefetch", 0)) if pdl.bulk_prefetch_ok(dev, w13) and (bk * w13.element_size()) % 16 == 0 \
        else 0
    _gate_up_pairs_kernel[(triton.cdiv(I, bn), P)](
        hidden, w13, inter, topk_ids, I, H, KT, k, expert_offset, L, topk_ids.stride(0), hidden.stride(0),
        w13.stride(0), w13.stride(1), inter.stride(0), b13, b13.stride(0), extra["alpha"],
        extra["limit"], BLOCK_N=bn, BLOCK_K=bk, **act, num_warps=nw, num_stages=ns,
        PF_DIST=pf_dist, **pdl.launch(dev),
    )
    if stages < 3:
        return out
    bn, bk, nw, ns = cfg["down"]
    nblk = triton.cdiv(H, bn)
    if cfg.get("down_slots"):
        _down_slots_kernel[(nblk, T)](
            inter, w2, out, topk_ids, topk_weights, H, I, KT, k, expert_offset, L, topk_ids.stride(0),
            topk_weights.stride(0), inter.stride(0), w2.stride(0), w2.stride(1), out.stride(0), b2, b2.stride(0),
            HAS_BIAS=has_b2, BLOCK_N=bn, BLOCK_K=bk, BKT=max(2, next_pow2(KT)), PAIR_FP32=pair_dtype == torch.float32,
            num_warps=nw, num_stages=ns, **pdl.launch(dev),
        )
        return out
    pair_out = torch.empty((P, H), dtype=pair_dtype, device=dev)
    _down_pairs_kernel[(nblk, P)](
        inter, w2, pair_out, out, topk_ids, topk_weights, _counters(dev, T * nblk), H, I, KT, k, expert_offset, L,
        topk_ids.stride(0), topk_weights.stride(0), inter.stride(0), w2.stride(0), w2.stride(1), pair_out.stride(0),
        out.stride(0), b2, b2.stride(0), HAS_BIAS=has_b2, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns,
        **pdl.launch(dev),
    )
    return out


def _choose(hidden, w13, w2, topk_weights, k, KT, L, S, activation, extra) -> dict:
    """Block config for this shape: the table's sorted-path entry, or, up to ``SMALL_T`` tokens, whichever of it and
    the pair path ran faster when first timed (CUDA-graph replays over several random routings, so the experts'
    weights come from HBM as in decode; outside any capture). ``MODELGEN_MOE=pairs|sorted`` forces the path."""
    T = hidden.shape[0]
    sorted_cfg = default_config(T, KT, L + S, hidden.dtype)
    if T > SMALL_T:
        return sorted_cfg
    forced = settings.get("MODELGEN_MOE")
    if forced in ("pairs", "sorted"):
        return dict(_PAIRS) if forced == "pairs" else sorted_cfg
    key = (T, KT, L + S, hidden.shape[1], w13.shape[1] // 2, hidden.dtype, topk_weights.dtype, w13.device)
    cfg = _CHOICE.get(key)
    if cfg is not None:
        return cfg
    if not hidden.is_cuda or torch.cuda.is_current_stream_capturing():
        return dict(_PAIRS)  # no timing inside a capture (warm-up runs choose first) or in the interpreter
    from ...ops.gpu.linear import _time

    g = torch.Generator(device=hidden.device).manual_seed(0)
    routings = [torch.randint(0, L, (T, k), device=hidden.device, generator=g, dtype=torch.int32) for _ in range(8)]
    w = torch.rand(T, k, device=hidden.device, generator=g).to(topk_weights.dtype)
    x = torch.randn_like(hidden)
    times, configs = {}, {"sorted": sorted_cfg}
    for c in _PAIR_CANDIDATES:
        if c["down"][1] <= 2 * next_pow2(w2.shape[2]):  # no K tile wider than twice the row
            name = f"pairs-down{'-slots' if c.get('down_slots') else ''}{'x'.join(map(str, c['down']))}"
            configs[name + (f"-up-prefetch{c['up_prefetch']}" if c.get("up_prefetch") else "")] = dict(c)
    for name, c in configs.items():
        run = lambda i, c=c: fused_moe(x, w13, w2, w, routings[i], activation, num_local_experts=L,  # noqa: E731
                                       num_shared=S, config=c, **extra)
        times[name] = _time(run, len(routings))
    TIMINGS[key[:-1]] = times
    cfg = _CHOICE[key] = configs[min(times, key=times.get)]
    return cfg
