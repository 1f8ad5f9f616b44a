"""Residual add + RMSNorm fused into the decode GEMV that consumes it (one token): one launch instead of two.

A pre-norm decoder layer runs ``h, residual = add_rms_norm(x, residual)`` and then a projection of ``h`` (the QKV
projection after ``input_layernorm``, the MoE router after ``post_attention_layernorm``). At batch 1 the norm is a
whole launch for 4 KB of work. Here every program of the split-K GEMV (``linear.py``'s ``_gemv_kernel`` design and
configs) first computes the row's RMS itself -- the row is 2-4K elements, read from L2 -- and then normalises the
slices of the row it multiplies; the programs of the first column block also write ``h`` (when a later kernel
needs it: the experts after the router) and the new residual. Rounding follows ``norm.py`` (the sum rounded to the
activation dtype, the mean of squares in fp32 over the whole row in one reduction, the normalised value rounded
before the weight multiply, whose product is rounded once; zero-centred ``x_hat * (1 + w)`` in fp32), so ``h`` is
the tensor the separate norm kernel writes.

Used by ``bench/moe_layer.py`` (setting ``*_nf``); the generated modules call the norm and the projection
separately, so wiring it in is a template change (see the issue 10 notes).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import next_pow2, pdl
from .linear import _COUNTERS, MAX_SPLIT, _gemv_configs, _graph_bench, _prune, gemv_ok


@triton.jit
def _normed_slice(x_ptrs, r_ptrs, nw_ptrs, rstd, ADD: tl.constexpr, ZERO_CENTRED: tl.constexpr):
    """(residual sum, normalised value) of one slice of the row, both in the activation dtype."""
    dt = x_ptrs.dtype.element_ty
    s = tl.load(x_ptrs)
    if ADD:
        s = (s.to(tl.float32) + tl.load(r_ptrs).to(tl.float32)).to(dt)
    w = tl.load(nw_ptrs).to(tl.float32)
    if ZERO_CENTRED:
        h = s.to(tl.float32) * rstd * (1.0 + w)
    else:
        h = w * (s.to(tl.float32) * rstd).to(dt).to(tl.float32)
    return s, h.to(dt)


@triton.autotune(configs=_gemv_configs(), key=["N", "K"], prune_configs_by={"early_config_prune": _prune},
                 do_bench=_graph_bench)
@triton.jit
def _norm_gemv_kernel(
    x_ptr, r_ptr, nw_ptr, w_ptr, y_ptr, h_ptr, ro_ptr, ws_ptr, cnt_ptr, eps, N, K, s_wn,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK_ROW: tl.constexpr,
    ADD: tl.constexpr, ZERO_CENTRED: tl.constexpr, H_OUT: tl.constexpr,
    PDL: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    k_len = K // SPLIT_K
    pdl.wait(PDL)
    # The row's mean of squares, over the whole (rounded) residual sum in one reduction as norm.py takes it.
    row = tl.arange(0, BLOCK_ROW)
    rmask = row < K
    s = tl.load(x_ptr + row, mask=rmask, other=0.0)
    if ADD:
        s = (s.to(tl.float32) + tl.load(r_ptr + row, mask=rmask, other=0.0).to(tl.float32)).to(x_ptr.dtype.element_ty)
    sf = s.to(tl.float32)
    rstd = tl.math.rsqrt(tl.sum(sf * sf, 0) / K + eps)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = pid_k * k_len + tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + offs_n.to(tl.int64)[:, None] * s_wn + offs_k[None, :]
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    for k0 in range(0, k_len, BLOCK_K):
        ks = offs_k + k0
        sk, hk = _normed_slice(x_ptr + ks, r_ptr + ks, nw_ptr + ks, rstd, ADD, ZERO_CENTRED)
        if pid_n == 0:  # the first column block's programs write the row's outputs, each its K slice
            if ADD:
                tl.store(ro_ptr + ks, sk)
            if H_OUT:
                tl.store(h_ptr + ks, hk)
        acc += tl.load(w_ptrs, eviction_policy="evict_first").to(tl.float32) * hk.to(tl.float32)[None, :]
        w_ptrs += BLOCK_K
    part = tl.sum(acc, 1)
    if SPLIT_K == 1:
        tl.store(y_ptr + offs_n, part.to(y_ptr.dtype.element_ty))
    else:  # the last arrival of the column block sums the K slices (linear.py's split-K GEMV)
        tl.store(ws_ptr + pid_k * N + offs_n, part)
        if tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel") == SPLIT_K - 1:
            total = tl.zeros([BLOCK_N], tl.float32)
            for sp in range(SPLIT_K):
                total += tl.load(ws_ptr + sp * N + offs_n, cache_modifier=".cg")
            tl.store(y_ptr + offs_n, total.to(y_ptr.dtype.element_ty))
            tl.atomic_xchg(cnt_ptr + pid_n, 0)


def supported(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor) -> bool:
    """One token, 16-bit activations with a norm weight of the same dtype, a GEMV-able weight."""
    return (x.dim() == 2 and x.shape[0] == 1 and x.dtype in (torch.bfloat16, torch.float16)
            and norm_weight.dtype == x.dtype and weight.dtype == x.dtype and weight.stride(-1) == 1
            and x.shape[1] == weight.shape[1] and gemv_ok(1, weight.shape[0], weight.shape[1]))


def add_rms_norm_linear(
    x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float, weight: torch.Tensor,
    zero_centred: bool = False, want_normed: bool = True, residual_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``(h @ weight.T, h or None, x + residual)`` with ``h = rms_norm(x + residual)`` (``residual=None``: no add,
    ``x`` is the residual) -- ``norm.add_rms_norm`` then ``F.linear`` in one launch for one token. Other shapes and
    dtypes: the two launches. ``residual_out``: where to write ``x + residual`` (a buffer a caller handed out before
    this runs, e.g. a norm module deferring its work to the projection after it)."""
    if not supported(x, norm_weight, weight):
        from . import norm as gpu_norm
        from .linear import linear

        h, res = gpu_norm.add_rms_norm(x, residual, norm_weight, eps, zero_centred)
        if residual_out is not None and residual is not None:
            residual_out.copy_(res)
            res = residual_out
        return linear(h, weight), (h if want_normed else None), res
    N, K = weight.shape
    x = x.contiguous()
    r = x if residual is None else residual.contiguous()
    y = torch.empty((1, N), dtype=x.dtype, device=x.device)
    res = x if residual is None else (torch.empty_like(x) if residual_out is None else residual_out)
    h = torch.empty_like(x) if want_normed else res
    key = (x.device, N)
    cnt = _COUNTERS.get(key)
    if cnt is None:
        cnt = _COUNTERS[key] = torch.zeros(N // 8, dtype=torch.int32, device=x.device)
    ws = torch.empty((MAX_SPLIT, N), dtype=torch.float32, device=x.device)
    grid = lambda meta: (N // meta["BLOCK_N"], meta["SPLIT_K"])  # noqa: E731
    # N, K positional: the autotuner's pruning reads them from the positional arguments
    _norm_gemv_kernel[grid](x, r, norm_weight, weight, y, h, res, ws, cnt, float(eps), N, K, weight.stride(0),
                            BLOCK_ROW=next_pow2(K), ADD=residual is not None, ZERO_CENTRED=bool(zero_centred),
                            H_OUT=want_normed, **pdl.launch(x.device))
    return y, (h if want_normed else None), res
