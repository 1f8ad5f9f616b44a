"""Skinny-M linear for decode (``M <= 64`` tokens): a Triton kernel streaming the weight once with deep software
pipelining, picked per weight shape against cuBLAS by timing both on first use (outside graph capture).

Decode at small batch is a weight-streaming problem: ``y = x @ W.T`` with ``W [N, K]`` read once, so the kernel
only has to keep enough bytes in flight. ``M`` is padded to 16/32/64 inside registers (tensor-core tile); the waste is
compute, which is free here. For ``M = 1`` a split-K GEMV (no tensor cores) is a third candidate.
``MODELGEN_GEMV=cublas|triton|gemv`` forces the choice.
"""
from __future__ import annotations


import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from modelgen import settings

from . import pdl

MAX_M = 64


def _graph_bench(kernel_call, quantiles):
    """Config timing from CUDA-graph replays (as decode runs), not Python launches that would hide kernel time.

    ``do_bench_cudagraph`` runs on a side stream that does not wait for the default stream: synchronise first, or a
    kernel still in flight there may read memory the caching allocator has already handed to this call's output
    (seen once: a test's float64 reference GEMM returned garbage while the skinny kernel autotuned).
    """
    torch.cuda.synchronize()
    try:
        return triton.testing.do_bench_cudagraph(kernel_call, rep=20, quantiles=quantiles)
    except Exception:  # capture refused (e.g. a driver without graph support): plain launches
        return triton.testing.do_bench(kernel_call, quantiles=quantiles)

_CONFIGS = [
    triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
    for bn, bk, w, s in [
        (16, 256, 4, 4), (32, 128, 4, 5), (32, 256, 4, 4), (64, 128, 4, 4),
        (64, 256, 4, 3), (128, 128, 8, 3), (32, 512, 4, 3),
    ]
]


@triton.autotune(configs=_CONFIGS, key=["N", "K", "BLOCK_M"], do_bench=_graph_bench)
@triton.heuristics({"EVEN_K": lambda a: a["K"] % a["BLOCK_K"] == 0})
@triton.jit
def _skinny_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, s_xm, s_wn, s_ym,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    PDL: tl.constexpr,
):
    pid = tl.program_id(0)
    pdl.wait(PDL)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mmask = offs_m < M
    nmask = offs_n < N
    x_ptrs = x_ptr + offs_m[:, None] * s_xm + offs_k[None, :]
    w_ptrs = w_ptr + offs_n.to(tl.int64)[:, None] * s_wn + offs_k[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            x = tl.load(x_ptrs, mask=mmask[:, None], other=0.0)
            w = tl.load(w_ptrs, mask=nmask[:, None], other=0.0, eviction_policy="evict_first")
        else:
            kmask = (k0 + offs_k) < K
            x = tl.load(x_ptrs, mask=mmask[:, None] & kmask[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=nmask[:, None] & kmask[None, :], other=0.0, eviction_policy="evict_first")
        acc = tl.dot(x, tl.trans(w), acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=nmask, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + offs_m[:, None] * s_ym + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=mmask[:, None] & nmask[None, :])


# ------------------------------------------------------------------------------------------- M = 1: split-K GEMV
# Small weights (o_proj, qkv: 32-50 MB) leave most SMs idle or starved with one program per row block; splitting K
# puts ~4 programs on every SM. The last program of each row block (an acq_rel counter) adds the partial sums and
# resets its counter, so one launch does the whole product and the kernel is safe to replay from a CUDA graph.
def _gemv_configs():
    out = []
    for bn, bk, sk, w in [(16, 256, 1, 4), (16, 256, 4, 4), (32, 256, 2, 4), (32, 256, 4, 4), (32, 128, 8, 4),
                          (16, 512, 4, 4), (32, 256, 8, 4), (64, 128, 4, 4), (16, 256, 8, 4), (8, 512, 4, 4)]:
        out.append(triton.Config({"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sk}, num_warps=w, num_stages=1))
    return out


def _prune(configs, named_args, **kwargs):
    N, K = named_args["N"], named_args["K"]
    ok = [c for c in configs if N % c.kwargs["BLOCK_N"] == 0
          and K % (c.kwargs["SPLIT_K"] * c.kwargs["BLOCK_K"]) == 0 and c.kwargs["SPLIT_K"] <= MAX_SPLIT]
    return ok or configs[:1]


MAX_SPLIT = 8


@triton.autotune(configs=_gemv_configs(), key=["N", "K"], prune_configs_by={"early_config_prune": _prune},
                 do_bench=_graph_bench)
@triton.jit
def _gemv_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr, N, K, s_wn,
    HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    PDL: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    k_len = K // SPLIT_K
    pdl.wait(PDL)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = pid_k * k_len + tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + offs_n.to(tl.int64)[:, None] * s_wn + offs_k[None, :]
    x_ptrs = x_ptr + offs_k
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    for _ in range(0, k_len, BLOCK_K):
        w = tl.load(w_ptrs, eviction_policy="evict_first")
        x = tl.load(x_ptrs)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
        w_ptrs += BLOCK_K
        x_ptrs += BLOCK_K
    part = tl.sum(acc, 1)
    if SPLIT_K == 1:
        if HAS_BIAS:
            part += tl.load(b_ptr + offs_n).to(tl.float32)
        tl.store(y_ptr + offs_n, part.to(y_ptr.dtype.element_ty))
    else:
        tl.store(ws_ptr + pid_k * N + offs_n, part)
        done = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel")
        if done == SPLIT_K - 1:
            total = tl.zeros([BLOCK_N], tl.float32)
            for s in range(SPLIT_K):
                total += tl.load(ws_ptr + s * N + offs_n, cache_modifier=".cg")
            if HAS_BIAS:
                total += tl.load(b_ptr + offs_n).to(tl.float32)
            tl.store(y_ptr + offs_n, total.to(y_ptr.dtype.element_ty))
            tl.atomic_xchg(cnt_ptr + pid_n, 0)


_COUNTERS: dict[tuple, torch.Tensor] = {}


def gemv(x1: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x1 [1, K]`` @ ``weight [N, K]``.T (+ bias) -> ``[1, N]``; needs ``N % 8 == 0`` and ``K % 512 == 0``."""
    N, K = weight.shape
    y = torch.empty((1, N), dtype=x1.dtype, device=x1.device)
    key = (x1.device, N)
    cnt = _COUNTERS.get(key)
    if cnt is None:
        cnt = _COUNTERS[key] = torch.zeros(N // 8, dtype=torch.int32, device=x1.device)  # left at zero by every call
    ws = torch.empty((MAX_SPLIT, N), dtype=torch.float32, device=x1.device)
    grid = lambda meta: (N // meta["BLOCK_N"], meta["SPLIT_K"])  # noqa: E731
    # N and K positional: the autotuner's pruning reads them from the positional arguments only
    _gemv_kernel[grid](x1, weight, bias if bias is not None else weight, y, ws, cnt, N, K, weight.stride(0),
                       HAS_BIAS=bias is not None, **pdl.launch(x1.device))
    return y


def gemv_ok(M: int, N: int, K: int) -> bool:
    return M == 1 and N % 8 == 0 and K % 512 == 0


# ------------------------------------------------------------------------------------------- 1 < M <= 16: dot tiles
def skinny_linear(x2: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    M, K = x2.shape
    N = weight.shape[0]
    y = torch.empty((M, N), dtype=x2.dtype, device=x2.device)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    _skinny_kernel[grid](x2, weight, bias if bias is not None else weight, y, M, N, K,
                         x2.stride(0), weight.stride(0), y.stride(0), HAS_BIAS=bias is not None,
                         BLOCK_M=max(16, triton.next_power_of_2(M)), **pdl.launch(x2.device))
    return y


_CHOICE: dict[tuple, str] = {}
TIMINGS: dict[tuple, dict[str, float]] = {}  # (M, N, K, dtype) -> {impl: ms}, for reports


def _time(fn, copies: int, reps: int = 12) -> float:
    """Milliseconds per call of ``fn(i)`` (i-th weight copy) replayed from a CUDA graph, as decode runs it: timing
    eager launches would charge Triton's Python launch cost, which the graph removes."""
    fn(0)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(reps):
            fn(i % copies)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / reps)
    del graph
    return best


def weight_copies(weight: torch.Tensor) -> list[torch.Tensor]:
    """The weight and up to four clones (at most 256 MB in all) to time a kernel on in turn: a weight that fits in
    L2 would otherwise be read from cache, not HBM as in decode."""
    nbytes = weight.numel() * weight.element_size()
    return [weight] + [weight.clone() for _ in range(min(4, (256 << 20) // max(nbytes, 1)))]


def _pick(key, x2, weight, bias) -> str:
    forced = settings.get("MODELGEN_GEMV")
    M, K = x2.shape
    N = weight.shape[0]
    impls = {"cublas": lambda w: F.linear(x2, w, bias), "triton": lambda w: skinny_linear(x2, w, bias)}
    if gemv_ok(M, N, K):
        impls["gemv"] = lambda w: gemv(x2, w, bias)
    if forced in impls:
        return forced
    copies = weight_copies(weight)
    times = {}
    for name, impl in impls.items():
        impl(weight)  # autotunes the Triton configs first (synchronising, outside any capture)
        try:
            times[name] = _time(lambda i, impl=impl: impl(copies[i]), len(copies))
        except Exception:
            times[name] = float("inf")
    del copies
    TIMINGS[key] = times
    best = min(times, key=times.get)
    return best if times[best] < 0.97 * times["cublas"] else "cublas"  # ties go to cuBLAS


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` for CUDA tensors, with the skinny kernel where it measured faster for this shape."""
    K = x.shape[-1]
    M = x.numel() // K if K else 0
    if not x.is_cuda or M == 0 or M > MAX_M or x.dtype not in (torch.bfloat16, torch.float16) or weight.dtype != x.dtype \
            or weight.stride(-1) != 1:
        return F.linear(x, weight, bias)
    key = (M, weight.shape[0], K, x.dtype, bias is not None)
    impl = _CHOICE.get(key)
    x2 = x.reshape(M, K)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if impl is None:
        if torch.cuda.is_current_stream_capturing():
            return F.linear(x, weight, bias)  # no timing inside a capture; warm-up runs pick first
        impl = _CHOICE[key] = _pick(key, x2, weight, bias)
    if impl == "cublas":
        return F.linear(x, weight, bias)
    if impl == "gemv":
        return gemv(x2, weight, bias).view(*x.shape[:-1], weight.shape[0])
    return skinny_linear(x2, weight, bias).view(*x.shape[:-1], weight.shape[0])
