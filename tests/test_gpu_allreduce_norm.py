"""The one-launch all-reduce + residual add + RMSNorm kernel (runtime/ops/gpu/allreduce_norm.py).

* On two CUDA GPUs (NCCL, one process per GPU): for bf16 and fp32, 1/8/32/64 rows, hidden 4096 and 2880, every RMSNorm
  convention and the first layer (no residual), the fused result equals the unfused path (NCCL all-reduce, then the
  add + RMSNorm) -- the new residual bit for bit (two addends round once in any order), the normed output within
  one rounding -- and every rank holds the same bits; then back-to-back calls of changing shapes interleaved with the
  plain all-reduce entry, a CUDA graph captured once and replayed with new inputs, and the wiring of
  ``runtime/layers/all_reduce_norm.py::all_reduce_add_rms_norm`` (the switch ``MODELGEN_FUSED_ALLREDUCE_NORM``).
* Without GPUs, in Triton's interpreter (``TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1``): the same kernel in two
  processes that share their exchange buffers (CPU shared memory, each process with its own mapping, as symmetric
  memory gives each rank its own): the flags, epochs and buffer halves under back-to-back reuse, and the sums.
* Anywhere: where the kernel does not apply it answers None (the caller's unfused path).
"""
from __future__ import annotations

import os
import threading

import pytest
import torch
import torch.multiprocessing as mp

from modelgen.runtime.ops import norm as ref
from tests.gpu_helpers import INTERPRET

EPS = 1e-5
WATCHDOG_S = 240
CASES = [  # name -> (zero_centred, weight_float32, with residual)
    ("llama", False, False, True), ("zero_centred", True, False, True), ("weight_float32", False, True, True),
    ("first_layer", False, False, False),
]


def _inputs(rank: int, rows: int, hidden: int, dtype, seed: int = 0):
    """Rank ``rank``'s partial sum, and the residual and weight every rank shares."""
    part = torch.randn(rows, hidden, generator=torch.Generator().manual_seed(1000 * seed + rank)).to(dtype)
    shared = torch.Generator().manual_seed(7 + seed)
    residual = torch.randn(rows, hidden, generator=shared).to(dtype)
    weight = (torch.randn(hidden, generator=shared) * 0.3 + 1.0).to(dtype)
    return part, residual, weight


def _want(parts, residual, weight, zc, f32):
    """The reference: the partial sums added in rank order in float32 and rounded (the all-reduce), then the torch
    add + RMSNorm."""
    total = parts[0].float()
    for p in parts[1:]:
        total = total + p.float()
    return ref.add_rms_norm(total.to(parts[0].dtype), residual, weight, EPS, zc, f32)


# ----------------------------------------------------------------------------------------------- anywhere (CPU)
def test_does_not_apply_without_a_cuda_world(monkeypatch):
    pytest.importorskip("triton")
    from modelgen.runtime.ops.gpu import allreduce_norm as arn

    x, r, w = _inputs(0, 2, 64, torch.float32)
    assert arn.all_reduce_add_rms_norm(x, r, w, EPS) is None  # CPU tensors, no process group
    assert arn.all_reduce(x) is None
    monkeypatch.setenv("MODELGEN_FUSED_ALLREDUCE_NORM", "0")
    assert not arn.fused_enabled()
    monkeypatch.setenv("MODELGEN_FUSED_ALLREDUCE_NORM", "1")
    monkeypatch.setenv("MODELGEN_CUSTOM_ALLREDUCE", "0")
    assert not arn.fused_enabled()


def test_shape_limits():
    pytest.importorskip("triton")
    from modelgen.runtime.ops.gpu import allreduce_norm as arn

    big = 512 * 1024
    assert arn.fits(torch.empty(1, 4096, dtype=torch.bfloat16), big)
    assert arn.fits(torch.empty(64, 2880, dtype=torch.bfloat16), big)
    assert not arn.fits(torch.empty(65, 64, dtype=torch.bfloat16), big)  # more rows than slots
    assert not arn.fits(torch.empty(1, 16385, dtype=torch.bfloat16), 1 << 30)  # a row wider than a slot
    assert not arn.fits(torch.empty(64, 4096, dtype=torch.float32), big)  # 1 MB > the one-shot limit
    assert not arn.fits(torch.empty(2, 64, dtype=torch.int32), big)
    assert not arn.fits(torch.empty(0, 64, dtype=torch.float32), big)


# ------------------------------------------------------------------------ Triton's interpreter, two CPU processes
INTERP_CALLS = [(3, 64, torch.float32), (1, 48, torch.float16), (4, 64, torch.float16), (2, 80, torch.float32),
                (3, 64, torch.float32)]  # (rows, hidden, dtype)
def _interp_rank(rank: int, bufs, out_dir: str) -> None:
    from modelgen.runtime.ops.gpu import allreduce_norm as arn

    torch.set_num_threads(1)
    ex = arn.Exchange([b.data_ptr() for b in bufs], rank, len(bufs), torch.device("cpu"), keep=bufs)
    res = {}
    # back-to-back calls of changing row counts and widths over the same slots, norm and plain all-reduce mixed:
    # every call reuses slots whose previous contents a slower peer may still be reading
    for i, (rows, hidden, dtype) in enumerate(INTERP_CALLS):
        for name, zc, f32, with_res in CASES:
            part, residual, weight = _inputs(rank, rows, hidden, dtype, seed=i)
            normed, new_res = arn.run_norm(ex, part, residual if with_res else None, weight, EPS, zc, f32)
            res[f"{i}.{name}.normed"], res[f"{i}.{name}.residual"] = normed, new_res
        res[f"{i}.plain"] = arn.run_all_reduce(ex, _inputs(rank, rows, hidden, dtype, seed=i)[0])
    # a plain all-reduce of several chunks, the last one partial
    res["chunks"] = arn.run_all_reduce(ex, torch.arange(9000, dtype=torch.float32) * (rank + 1))
    res["epochs"] = ex.epochs.clone()
    torch.save(res, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.mark.skipif(not INTERPRET, reason="needs TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1")
def test_two_ranks_in_the_interpreter(tmp_path):
    from modelgen.runtime.ops.gpu import allreduce_norm as arn

    bufs = [torch.zeros(arn.TOTAL_BYTES, dtype=torch.uint8).share_memory_() for _ in range(2)]
    mp.spawn(_interp_rank, args=(bufs, str(tmp_path)), nprocs=2)
    got = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for key in got[0]:
        assert torch.equal(got[0][key], got[1][key]), f"{key}: the ranks differ"
    for i, (rows, hidden, dtype) in enumerate(INTERP_CALLS):
        parts = [_inputs(r, rows, hidden, dtype, seed=i)[0] for r in range(2)]
        _, residual, weight = _inputs(0, rows, hidden, dtype, seed=i)
        for name, zc, f32, with_res in CASES:
            want_normed, want_res = _want(parts, residual if with_res else None, weight, zc, f32)
            assert torch.equal(got[0][f"{i}.{name}.residual"], want_res), f"{i}.{name}"
            tol = 1e-5 if dtype == torch.float32 else 1e-3
            torch.testing.assert_close(got[0][f"{i}.{name}.normed"], want_normed, atol=tol, rtol=tol)
        assert torch.equal(got[0][f"{i}.plain"], (parts[0].float() + parts[1].float()).to(dtype))
    assert torch.equal(got[0]["chunks"], torch.arange(9000, dtype=torch.float32) * 3)
    # each row's epoch counts the calls that had that row: the norm calls, the one-chunk plain all-reduces (row 0)
    # and the three chunks of the last one
    want_epochs = [sum(len(CASES) * (rows > j) + (j == 0) for rows, _, _ in INTERP_CALLS) + (j < 3) for j in range(6)]
    assert got[0]["epochs"][:6].tolist() == want_epochs


# ------------------------------------------------------------------------------------------- two CUDA GPUs, NCCL
def _gpu_rank(rank: int, world: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
                      NCCL_NVLS_ENABLE="0")
    # a barrier that never completes spins on the GPU for ever: fail the test instead (exiting frees the GPU)
    watchdog = threading.Timer(WATCHDOG_S, lambda: os._exit(3))
    watchdog.daemon = True
    watchdog.start()
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    try:
        _gpu_checks(rank, world)
        open(os.path.join(out_dir, f"ok{rank}"), "w").close()
    finally:
        dist.destroy_process_group()
        watchdog.cancel()


def _unfused(part, residual, weight, zc, f32):
    """Today's two-launch path: NCCL all-reduce, then the Triton add + RMSNorm (torch's for weight_float32)."""
    import torch.distributed as dist

    from modelgen.runtime.ops.gpu import norm as gpu_norm

    total = part.clone()
    dist.all_reduce(total)
    if f32:
        return ref.add_rms_norm(total, residual, weight, EPS, zc, f32)
    return gpu_norm.add_rms_norm(total, residual, weight, EPS, zc)


def _same_on_all_ranks(t: torch.Tensor, what: str) -> None:
    import torch.distributed as dist

    gathered = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, t.contiguous())
    assert all(torch.equal(gathered[0], g) for g in gathered), f"{what}: ranks differ"


def _check(got, part, residual, weight, zc, f32, what):
    want_normed, want_res = _unfused(part, residual, weight, zc, f32)
    # two addends: NCCL and the kernel both round the exact sum once, then the same float32 residual add
    assert torch.equal(got[1], want_res), f"{what}: residual differs from NCCL + add"
    tol = 1e-5 if part.dtype == torch.float32 else 1.6e-2  # one bf16 rounding of the normed value
    torch.testing.assert_close(got[0], want_normed, atol=tol, rtol=tol, msg=lambda m: f"{what}: {m}")
    _same_on_all_ranks(got[0], what + " normed")
    _same_on_all_ranks(got[1], what + " residual")


def _gpu_checks(rank: int, world: int) -> None:
    from modelgen.runtime.layers import all_reduce_norm as ops_norm
    from modelgen.runtime.ops.gpu import allreduce_norm as arn

    dev = torch.device("cuda", rank)
    # 1. every dtype, row count, width and convention
    for dtype in (torch.bfloat16, torch.float32):
        for hidden in (4096, 2880):
            for rows in (1, 8, 32, 64):
                if rows * hidden * torch.empty((), dtype=dtype).element_size() > arn._max_bytes():
                    continue
                for name, zc, f32, with_res in CASES:
                    part, residual, weight = (t.to(dev) for t in _inputs(rank, rows, hidden, dtype, seed=rows))
                    residual = residual if with_res else None
                    got = arn.all_reduce_add_rms_norm(part, residual, weight, EPS, zc, f32)
                    assert got is not None, f"fused kernel did not apply: {dtype} {rows}x{hidden} {name}"
                    _check(got, part, residual, weight, zc, f32, f"{dtype} {rows}x{hidden} {name}")
    # 2. back to back: 60 calls of changing shapes, plain all-reduces in between, no host sync in between
    g = torch.Generator().manual_seed(3)
    inputs = []
    for i in range(60):  # on the device first: the calls below then run with no host copy (no sync) in between
        rows = int(torch.randint(1, 65, (1,), generator=g))
        hidden = (4096, 2880, 1024)[i % 3]
        inputs.append([t.to(dev) for t in _inputs(rank, rows, hidden, torch.bfloat16, seed=100 + i)])
    torch.cuda.synchronize()
    calls = []
    for part, residual, weight in inputs:
        calls.append((part, residual, weight, arn.all_reduce_add_rms_norm(part, residual, weight, EPS)))
        plain = part * 0.5
        calls.append((plain, None, None, arn.all_reduce(plain)))
    for i, (part, residual, weight, got) in enumerate(calls):
        if weight is None:
            want = part.clone()
            torch.distributed.all_reduce(want)
            assert torch.equal(got, want), f"back-to-back plain all-reduce {i}"
        else:
            _check(got, part, residual, weight, False, False, f"back-to-back call {i}")
    # 3. a CUDA graph captured once, replayed with new inputs: 8 layers' worth of fused calls and plain all-reduces
    rows, hidden = 8, 4096
    part, residual, weight = (t.to(dev) for t in _inputs(rank, rows, hidden, torch.bfloat16, seed=500))

    def layers(p, r):
        outs = []
        for _ in range(4):
            normed, r = arn.all_reduce_add_rms_norm(p, r, weight, EPS)
            p = arn.all_reduce(normed * 0.25)
            outs += [normed, r, p]
        return outs

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        layers(part, residual)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = layers(part, residual)
    for k in range(20):
        new_part, new_res, _ = (t.to(dev) for t in _inputs(rank, rows, hidden, torch.bfloat16, seed=600 + k))
        part.copy_(new_part)
        residual.copy_(new_res)
        graph.replay()
        want = layers(new_part, new_res)  # eager, the same kernel: the replay must match it bit for bit
        for j, (o, w) in enumerate(zip(outs, want)):
            assert torch.equal(o, w), f"graph replay {k}, output {j} differs from the eager calls"
        _same_on_all_ranks(outs[-1], f"graph replay {k}")
    # and the replay against the unfused path, layer one
    _check((outs[0], outs[1]), part, residual, weight, False, False, "graph replay vs unfused")
    # 4. runtime/layers/all_reduce_norm.py takes the fused kernel (the epoch of row 0 advances), the switch turns it off
    part, residual, weight = (t.to(dev) for t in _inputs(rank, 1, 4096, torch.bfloat16, seed=9))
    ex = arn.exchange(part)
    before = int(ex.epochs[0])
    fused = ops_norm.all_reduce_add_rms_norm(part, residual, weight, EPS)
    assert int(ex.epochs[0]) == before + 1, "norm.all_reduce_add_rms_norm did not take the fused kernel"
    os.environ["MODELGEN_FUSED_ALLREDUCE_NORM"] = "0"
    try:
        unfused = ops_norm.all_reduce_add_rms_norm(part, residual, weight, EPS)
    finally:
        os.environ["MODELGEN_FUSED_ALLREDUCE_NORM"] = "1"
    assert int(ex.epochs[0]) == before + 1, "MODELGEN_FUSED_ALLREDUCE_NORM=0 still took the fused kernel"
    assert torch.equal(fused[1], unfused[1])
    torch.testing.assert_close(fused[0], unfused[0], atol=1.6e-2, rtol=1.6e-2)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_fused_equals_unfused_on_two_gpus(tmp_path):
    mp.spawn(_gpu_rank, args=(2, 29531, str(tmp_path)), nprocs=2)
    assert all((tmp_path / f"ok{r}").exists() for r in range(2))
