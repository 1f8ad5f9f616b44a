"""All-reduce latency at decode message sizes on one host's GPUs: NCCL vs the one-shot symmetric-memory kernels
(PyTorch's, runtime/ops/gpu/allreduce.py, and the Triton one of runtime/ops/gpu/allreduce_norm.py), and all-reduce +
residual add + RMSNorm: NCCL + the Triton add_rms_norm, PyTorch's one-shot + add_rms_norm, and the one-launch fused
kernel (runtime/ops/gpu/allreduce_norm.py) -- all measured inside CUDA-graph replays (how decode runs them), in one
run.

Per size (bf16 rows of a 4096-wide hidden state: batch 1, 8, 32, 64, 256 and 1024 tokens): microseconds per call =
graph replay time / calls per graph (each call's input depends on the previous call's output, as layer n+1's does on
layer n's); plus exactness checks under back-to-back reuse of the buffers: one-shot == NCCL bit for bit on
integer-valued bf16 inputs, every rank gets the same bits on random inputs, and the fused kernel against NCCL + norm
(the residual bit for bit, the normed output: how many elements equal and the largest difference).

  python bench/allreduce.py --out bench/results/h200x2-allreduce.json    # on a 2-GPU machine
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from modelgen import settings  # noqa: E402

HIDDEN = 4096
ROWS = [1, 8, 32, 64, 256, 1024]


def _graph_us(fn, state: tuple, per_graph: int, replays: int) -> float:
    """Microseconds per ``fn`` call: ``per_graph`` chained calls (``state = fn(*state)``) captured in one graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(*state)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        st = state
        for _ in range(per_graph):
            st = fn(*st)
    g.replay()
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(replays):
        g.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / replays / per_graph * 1e6


def worker(rank: int, world: int, port: int, out_path: str | None) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    watchdog = threading.Timer(540, lambda: os._exit(3))  # a hung barrier spins for ever: exit (frees the GPU)
    watchdog.daemon = True
    watchdog.start()
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    from modelgen.runtime.ops.gpu import allreduce, allreduce_norm
    from modelgen.runtime.ops.gpu import norm as gpu_norm

    eps = 1e-5

    def nccl(t):
        dist.all_reduce(t)
        return t

    def one_shot(t):  # PyTorch's kernel, the column beside the Triton one
        y = allreduce.pytorch_one_shot(t)
        assert y is not None, "one-shot all-reduce did not apply"
        return y

    def triton_one_shot(t):
        y = allreduce_norm.all_reduce(t)
        assert y is not None, "Triton all-reduce did not apply"
        return y

    def fused(x, r, w):
        out = allreduce_norm.all_reduce_add_rms_norm(x, r, w, eps)
        assert out is not None, "fused all-reduce + norm did not apply"
        return out

    def chained(reduce):  # one all-reduce, then the next layer's input
        return lambda t: (reduce(t) * 0.5,)

    def norm_chain(op):  # all-reduce + add + norm (one op or two), then the next layer's input
        def step(x, r, w):
            normed, r = op(x, r, w)
            return normed * 0.5, r, w
        return step

    def unfused(reduce):
        return lambda x, r, w: gpu_norm.add_rms_norm(reduce(x), r, w, eps)

    rows_out = []
    limit = settings.get("MODELGEN_CUSTOM_ALLREDUCE_MAX_BYTES")
    for rows in ROWS:
        if rows * HIDDEN * 2 > limit:  # beyond the one-shot's buffers: the engine takes NCCL there
            if rank == 0:
                print(json.dumps({"rows": rows, "skipped": f"{rows * HIDDEN * 2} bytes > {limit}"}), flush=True)
            continue
        x = torch.randn(rows, HIDDEN, device="cuda", dtype=torch.bfloat16)
        # the residual stream and the norm weight are the same on every rank (as in a model); only x, the partial
        # sums, differ
        shared = torch.Generator().manual_seed(rows)
        res = torch.randn(rows, HIDDEN, generator=shared).to("cuda", torch.bfloat16)
        w = (torch.randn(HIDDEN, generator=shared) * 0.3 + 1.0).to("cuda", torch.bfloat16)
        # exactness: integer-valued inputs sum exactly in any order
        ints = torch.randint(-8, 8, (rows, HIDDEN), device="cuda").to(torch.bfloat16) * (rank + 1)
        exact = bool(torch.equal(one_shot(ints.clone()), nccl(ints.clone())))
        exact_triton = bool(torch.equal(triton_one_shot(ints.clone()), nccl(ints.clone())))
        # every rank gets the same bits, also after 200 back-to-back reuses of the buffers
        y, z = x.clone(), x.clone()
        for i in range(200):
            y = one_shot(y) * (1.0 / world)
            z = triton_one_shot(z) * (1.0 / world)
        # the fused kernel against NCCL + norm on random inputs, 50 calls back to back, then compared
        outs = [(xi, fused(xi, res, w)) for xi in [torch.randn_like(x) for _ in range(50)]]
        res_equal, normed_equal, normed_diff = True, 0.0, 0.0
        for xi, (normed, r) in outs:
            want_normed, want_r = gpu_norm.add_rms_norm(nccl(xi.clone()), res, w, eps)
            res_equal &= bool(torch.equal(r, want_r))
            normed_equal += (normed == want_normed).float().mean().item() / len(outs)
            normed_diff = max(normed_diff, (normed.float() - want_normed.float()).abs().max().item())
        same = {}
        for name, t in (("one_shot", y), ("triton_one_shot", z), ("fused_normed", outs[-1][1][0]),
                        ("fused_residual", outs[-1][1][1])):
            gathered = [torch.empty_like(t) for _ in range(world)]
            dist.all_gather(gathered, t)
            same[name] = all(torch.equal(gathered[0], g) for g in gathered)
        n_us = _graph_us(chained(nccl), (x.clone(),), 32, 20)
        o_us = _graph_us(chained(one_shot), (x.clone(),), 32, 20)
        t_us = _graph_us(chained(triton_one_shot), (x.clone(),), 32, 20)
        nn_us = _graph_us(norm_chain(unfused(nccl)), (x.clone(), res.clone(), w), 32, 20)
        on_us = _graph_us(norm_chain(unfused(one_shot)), (x.clone(), res.clone(), w), 32, 20)
        f_us = _graph_us(norm_chain(fused), (x.clone(), res.clone(), w), 32, 20)
        row = {"rows": rows, "bytes": rows * HIDDEN * 2, "nccl_us": round(n_us, 2), "one_shot_us": round(o_us, 2),
               "triton_one_shot_us": round(t_us, 2), "speedup": round(n_us / o_us, 2),
               "nccl_norm_us": round(nn_us, 2), "one_shot_norm_us": round(on_us, 2), "fused_norm_us": round(f_us, 2),
               "fused_speedup_vs_one_shot_norm": round(on_us / f_us, 2),
               "exact_vs_nccl": exact, "triton_exact_vs_nccl": exact_triton, "ranks_bit_identical": same,
               "fused_residual_equal": res_equal, "fused_normed_equal_frac": round(normed_equal, 6),
               "fused_normed_max_diff": normed_diff}
        rows_out.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
    if rank == 0 and out_path:
        Path(out_path).write_text(json.dumps({"world": world, "device": torch.cuda.get_device_name(0),
                                              "torch": torch.__version__, "hidden": HIDDEN, "rows": rows_out},
                                             indent=1))
    dist.barrier()
    dist.destroy_process_group()
    watchdog.cancel()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    mp.spawn(worker, args=(args.world, 29517, args.out), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
