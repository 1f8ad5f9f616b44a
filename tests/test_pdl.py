"""Programmatic dependent launch of the decode-chain kernels (``runtime/ops/gpu/pdl.py``).

Three levels: the switch is a no-op off sm_90 CUDA devices (here: CPU tensors and Triton's interpreter); the kernels
compiled for sm_90a with PDL on wait for their predecessor before reading anything it writes, release their
dependents only after that wait and issue no L2 prefetch (the pre-wait and ahead prefetches lost their measurements
and were removed; only the MoE pair gate-up's timed in-loop prefetch remains, after the wait), and compiled without
PDL (as for sm_80) carry no grid-dependency instruction at all -- checked in the PTX, which needs no GPU (Triton
ships ptxas); and on an sm_90+ GPU a captured decode chain (norm -> router -> fused MoE, both the pair and the
sorted path) gives bitwise the same outputs with PDL on as off, replay after replay on new inputs.
"""
from __future__ import annotations

import os

import pytest
import torch

from tests.gpu_helpers import DEV, INTERPRET, rel

triton = pytest.importorskip("triton")


@pytest.fixture
def pdl_on():
    from modelgen.runtime.ops.gpu import pdl

    pdl.set_mode(pdl=True)
    yield pdl
    pdl.refresh()


def test_switch_is_off_for_cpu_tensors_and_the_interpreter(pdl_on, monkeypatch):
    pdl = pdl_on
    assert pdl.launch(torch.device("cpu")) == {"PDL": False}
    assert not pdl.bulk_prefetch_ok(torch.device("cpu"), torch.zeros(8, 8))
    monkeypatch.delenv("MODELGEN_PDL", raising=False)
    pdl.refresh()
    assert pdl._STATE["pdl"] == 1  # the default since the end-to-end A/B (module docstring)
    monkeypatch.setenv("MODELGEN_PDL", "0")
    pdl.refresh()
    assert not pdl._STATE["pdl"]
    monkeypatch.setenv("MODELGEN_PDL", "1")
    pdl.refresh()
    assert pdl._STATE["pdl"] == 1 and set(pdl._STATE) == {"pdl"}  # the prefetch switches are gone
    monkeypatch.setenv("MODELGEN_PDL", "2")  # the early-release level lost and was removed
    with pytest.raises(ValueError, match="MODELGEN_PDL='2'"):
        pdl.refresh()
    monkeypatch.setenv("MODELGEN_PDL", "yes")
    with pytest.raises(ValueError, match="MODELGEN_PDL='yes'"):
        pdl.refresh()


# ------------------------------------------------------------------------------------------------ PTX, no GPU needed
compiles = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                              reason="compiles kernels: not with TRITON_INTERPRET=1 (the interpreter wraps them)")
_INT_PTRS = {"ids_ptr", "sorted_ptr", "expert_ids_ptr", "npost_ptr", "cursor_ptr", "cnt_ptr"}
_F32_PTRS = {"logits_ptr", "ws_ptr", "tw_ptr", "bias_ptr"}


def _jit(kernel):
    from triton.runtime.jit import JITFunction

    while not isinstance(kernel, JITFunction):  # autotune / heuristics wrappers
        kernel = kernel.fn
    return kernel


def _ptx(kernel, const: dict, capability: int, warps: int = 4, stages: int = 3) -> list[str]:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = _jit(kernel)
    sig = {}
    for a in fn.arg_names:
        if a in const:
            sig[a] = "constexpr"
        elif a.endswith("_ptr"):
            sig[a] = "*i32" if a in _INT_PTRS else ("*fp32" if a in _F32_PTRS else "*bf16")
        elif a in ("eps", "scaling"):
            sig[a] = "fp32"
        else:
            sig[a] = "i32"
    opts = {"num_warps": warps, "num_stages": stages}
    if const.get("PDL"):
        opts["launch_pdl"] = True
    c = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const), target=GPUTarget("cuda", capability, 32),
                       options=opts)
    return c.asm["ptx"].splitlines()


def _chain_kernels():
    from modelgen.runtime.layers.moe import kernels as gm
    from modelgen.runtime.ops.gpu import activation as ga, linear as gl, norm as gn, norm_linear as nl

    route = dict(NG=1, PG=128, BG=1, BP=128, TOPK=8, BK=8, TOPK_GROUP=1, SIGMOID=False, HAS_BIAS=False, RENORM=True,
                 TOPK_SOFTMAX=False)
    # (kernel, constexprs, warps, stages, global loads allowed before the wait: what two-back kernels wrote)
    return [
        (gn._rms_norm_kernel, dict(N=2048, BLOCK=2048, ADD=True, ZERO_CENTRED=False), 4, 3, 0),
        (ga._gated_kernel, dict(BLOCK=1024, GELU=False), 4, 3, 0),
        (gl._skinny_kernel, dict(HAS_BIAS=False, BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, EVEN_K=True), 4, 4, 0),
        (gl._gemv_kernel, dict(HAS_BIAS=False, BLOCK_N=16, BLOCK_K=256, SPLIT_K=4), 4, 1, 0),
        (gm._route_kernel, route, 2, 3, 0),
        (gm._router_topk_kernel, dict(route, BLOCK_E=16, BLOCK_K=256, IEEE=False), 4, 3, 0),
        (gm._align_kernel, dict(BLOCK_M=16, NB=256, CHUNK=256, CHUNK_B=128), 4, 3, 0),
        (gm._gate_up_kernel, dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, EVEN_K=True, GELU=False, IEEE=False), 4, 4, 0),
        (gm._down_kernel, dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, EVEN_K=True, IEEE=False), 4, 4, 1),
        (gm._combine_kernel, dict(BKT=8, BLOCK_H=1024), 4, 3, 0),
        (gm._gate_up_pairs_kernel, dict(BLOCK_N=16, BLOCK_K=256, GELU=False, PF_DIST=0), 4, 3, 0),
        (gm._down_pairs_kernel, dict(BLOCK_N=32, BLOCK_K=256), 4, 3, 1),
        (gm._down_slots_kernel, dict(BLOCK_N=8, BLOCK_K=128, BKT=8, PAIR_FP32=False), 4, 3, 1),
        (nl._norm_gemv_kernel, dict(BLOCK_N=16, BLOCK_K=256, SPLIT_K=4, BLOCK_ROW=2048, ADD=True, ZERO_CENTRED=False,
                                    H_OUT=True), 4, 1, 0),
    ]


@compiles
@pytest.mark.parametrize("case", range(14))
def test_sm90_ptx_waits_before_reading_and_prefetches_nothing(case):
    kernel, const, warps, stages, allowed = _chain_kernels()[case]
    assert not {"PREFETCH", "AHEAD"} & set(_jit(kernel).arg_names)  # the removed prefetch paths stay removed
    lines = _ptx(kernel, dict(const, PDL=1), 90, warps, stages)
    wait = [i for i, s in enumerate(lines) if "griddepcontrol.wait" in s]
    release = [i for i, s in enumerate(lines) if "griddepcontrol.launch_dependents" in s]
    assert wait and release and wait[0] < release[0]  # dependents launch only once this kernel's inputs are final
    assert not any("cp.async.bulk.prefetch" in s for s in lines)
    before = [s for s in lines[:wait[0]] if "ld.global" in s or "atom.global" in s or "st.global" in s]
    assert not any("st.global" in s or "atom.global" in s for s in before)  # nothing written before the wait
    assert len(before) <= allowed, before  # only the two-back routing data (ids, row counts) is read early


@compiles
def test_gate_up_prefetch_distance():
    """The pair gate-up's ``up_prefetch`` candidates: bulk L2 prefetches inside the K loop (after the wait, as the
    loads), with or without PDL."""
    from modelgen.runtime.layers.moe import kernels as gm

    const = dict(BLOCK_N=16, BLOCK_K=256, GELU=False, PF_DIST=2)
    for level in (0, 1):
        lines = _ptx(gm._gate_up_pairs_kernel, dict(const, PDL=level), 90)
        prefetch = [i for i, s in enumerate(lines) if "cp.async.bulk.prefetch.L2" in s]
        assert len(prefetch) >= 2  # gate rows and up rows
        if level:
            assert min(prefetch) > min(i for i, s in enumerate(lines) if "griddepcontrol.wait" in s)
    assert not any("cp.async.bulk" in s for s in _ptx(gm._gate_up_pairs_kernel, dict(const, PF_DIST=0, PDL=0), 80))


@compiles
@pytest.mark.parametrize("case", [0, 3, 7, 11, 12])
def test_without_pdl_no_grid_dependency_instruction(case):
    """PDL off compiles the kernels as before (sm_80 has no griddepcontrol: it must not appear)."""
    kernel, const, warps, stages, _ = _chain_kernels()[case]
    lines = _ptx(kernel, dict(const, PDL=0), 80, warps, min(stages, 3))
    assert not any("griddepcontrol" in s or "cp.async.bulk" in s for s in lines)


# ------------------------------------------------------------------------------ the kernels' arithmetic, anywhere
@pytest.mark.skipif(not torch.cuda.is_available() and not INTERPRET, reason="needs a CUDA GPU or Triton's interpreter")
@pytest.mark.parametrize("split_k", [1, 4])
def test_gemv_and_skinny_kernels_with_the_new_arguments(split_k):
    """The split-K GEMV (its last-arrival sum resets the counters) and the skinny kernel with one fixed config (the
    autotuner times on a GPU only), PDL off as off-sm_90: torch's product."""
    from modelgen.runtime.ops.gpu import linear as gl

    N, K = 256, 1024
    f = dict(device=DEV, dtype=torch.float32)
    x, w, b = torch.randn(1, K, **f), torch.randn(N, K, **f), torch.randn(N, **f)
    y, ws = torch.empty(1, N, **f), torch.empty(8, N, **f)
    cnt = torch.zeros(N // 8, dtype=torch.int32, device=DEV)
    off = dict(PDL=False, num_warps=4)
    gl._gemv_kernel.fn[(N // 16, split_k)](x, w, b, y, ws, cnt, N=N, K=K, s_wn=K, HAS_BIAS=True, BLOCK_N=16,
                                           BLOCK_K=256, SPLIT_K=split_k, **off)
    assert rel(y, x.double() @ w.double().T + b.double()) < 1e-5 and int(cnt.abs().sum()) == 0
    x3, y3 = torch.randn(3, K, **f), torch.empty(3, N, **f)
    gl._skinny_kernel.fn[(N // 32,)](x3, w, w, y3, M=3, N=N, K=K, s_xm=K, s_wn=K, s_ym=N, HAS_BIAS=False,
                                     BLOCK_M=16, BLOCK_N=32, BLOCK_K=128 * split_k, **off)
    # tl.dot on fp32 inputs runs TF32 on a GPU (10-bit mantissa: ~1e-3 relative over this K; measured 7.7e-4 on the
    # H200), exact fp32 in the interpreter
    assert rel(y3, x3.double() @ w.double().T) < (1e-4 if INTERPRET else 3e-3)


@pytest.mark.skipif(not INTERPRET, reason="Triton's interpreter (a GPU runs this through test_gpu.py)")
def test_gemv_and_skinny_through_the_autotuner(monkeypatch):
    """The public ``gemv`` / ``skinny_linear`` launches through the autotuner (its config pruning reads N and K from
    the positional arguments), every surviving config run once in the interpreter in place of GPU timing."""
    from modelgen.runtime.ops.gpu import linear as gl

    for kern in (gl._gemv_kernel, gl._skinny_kernel):
        monkeypatch.setattr(kern, "_do_bench", lambda call, quantiles: (call(), [1.0, 1.0, 1.0])[1])
        monkeypatch.setattr(kern, "cache", {})
    N, K = 64, 512
    x, w, b = torch.randn(1, K), torch.randn(N, K), torch.randn(N)
    assert rel(gl.gemv(x, w, b), x.double() @ w.double().T + b.double()) < 1e-5
    x3 = torch.randn(3, K)
    assert rel(gl.skinny_linear(x3, w, None), x3.double() @ w.double().T) < 1e-5


# -------------------------------------------------------------------------------------------------------- on an H200
def _sm90():
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="needs an sm_90+ CUDA GPU")
@pytest.mark.parametrize("T,path", [(1, "pairs"), (1, "slots"), (8, "sorted")])
def test_graphed_moe_chain_is_bitwise_the_same_with_pdl(T, path, monkeypatch):
    from modelgen.runtime.layers.moe import kernels as gm
    from modelgen.runtime.ops.gpu import linear as gl, norm as gn, pdl

    if path == "slots":  # the pair path with the down GEMV over each token's slots
        monkeypatch.setattr(gm, "_PAIRS", next(c for c in gm._PAIR_CANDIDATES if c.get("down_slots")))
    monkeypatch.setenv("MODELGEN_MOE", "sorted" if path == "sorted" else "pairs")
    monkeypatch.setenv("MODELGEN_GEMV", "gemv" if T == 1 else "triton")
    torch.manual_seed(0)
    H, E, k, I, layers = 1024, 64, 8, 384, 4
    bf = dict(device="cuda", dtype=torch.bfloat16)
    W = [dict(ln=1 + 0.1 * torch.randn(H, **bf), wr=torch.randn(E, H, **bf) * 0.05,
              w13=torch.randn(E, 2 * I, H, **bf) * H ** -0.5, w2=torch.randn(E, H, I, **bf) * I ** -0.5)
         for _ in range(layers)]
    x = torch.randn(T, H, **bf)
    res0 = torch.randn(T, H, **bf)

    def chain():
        h, res = x, res0
        for w in W:
            n, res = gn.add_rms_norm(h, res, w["ln"], 1e-6)
            tw, ids = gm.router(n, w["wr"], k, scoring="softmax", renormalize=True, out_dtype=torch.bfloat16,
                                gemm=gl.linear)
            h = gm.fused_moe(n, w["w13"], w["w2"], tw, ids)
        return torch.cat([h, res], dim=1)

    def replays(on: bool) -> list[torch.Tensor]:
        pdl.set_mode(pdl=on)
        assert pdl.active(x.device) == on
        gl._CHOICE.clear()
        chain()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = chain()
        outs = []
        for i in range(4):
            x.copy_(torch.randn(x.shape, generator=torch.Generator("cuda").manual_seed(i), device="cuda"))
            graph.replay()
            torch.cuda.synchronize()
            outs.append(out.clone())
        outs.append(chain())  # eager launches too
        return outs

    try:
        off, on = replays(False), replays(True)
    finally:
        pdl.refresh()
    assert len({tuple(o[0, :4].tolist()) for o in off[:4]}) > 1  # the inputs did change between replays
    for a, b in zip(on, off):
        assert torch.equal(a, b)
