"""All-reduce latency at decode message sizes on one host's GPUs: NCCL vs the one-shot symmetric-memory kernel
(runtime/ops/gpu/allreduce.py), both measured inside CUDA-graph replays (how decode runs them), in one run.

Per size (bf16 rows of a 4096-wide hidden state: batch 1, 8, 32, 64, 256 and 1024 tokens): microseconds per
all-reduce = graph replay time / all-reduces per graph; plus an exactness check (one-shot == NCCL bit for bit on
integer-valued bf16 inputs, and every rank gets the same bits on random inputs) under back-to-back reuse of the
buffers.

  python bench/allreduce.py --out bench/results/h200x2-allreduce.json    # on a 2-GPU machine
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HIDDEN = 4096
ROWS = [1, 8, 32, 64, 256, 1024]


def _graph_us(fn, x, per_graph: int, replays: int) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x
        for _ in range(per_graph):
            y = fn(y) * 0.5  # depend on the previous result, as layer n+1 does on layer n's all-reduce
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
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    from modelgen.runtime.ops.gpu import allreduce

    def nccl(t):
        dist.all_reduce(t)
        return t

    def one_shot(t):
        y = allreduce.one_shot(t)
        assert y is not None, "one-shot all-reduce did not apply"
        return y

    rows_out = []
    limit = int(os.environ.get("MODELGEN_CUSTOM_ALLREDUCE_MAX_BYTES", allreduce.DEFAULT_MAX_BYTES))
    for rows in ROWS:
        if rows * HIDDEN * 2 > limit:  # beyond the one-shot's buffers: the engine takes NCCL there
            if rank == 0:
                print(json.dumps({"rows": rows, "skipped": f"{rows * HIDDEN * 2} bytes > {limit}"}), flush=True)
            continue
        x = torch.randn(rows, HIDDEN, device="cuda", dtype=torch.bfloat16)
        # exactness: integer-valued inputs sum exactly in any order
        ints = torch.randint(-8, 8, (rows, HIDDEN), device="cuda").to(torch.bfloat16) * (rank + 1)
        exact = bool(torch.equal(one_shot(ints.clone()), nccl(ints.clone())))
        # every rank gets the same bits, also after 200 back-to-back reuses of the two buffers
        y = x.clone()
        for i in range(200):
            y = one_shot(y) * (1.0 / world)
        gathered = [torch.empty_like(y) for _ in range(world)]
        dist.all_gather(gathered, y)
        same = all(torch.equal(gathered[0], g) for g in gathered)
        n_us = _graph_us(nccl, x.clone(), 32, 20)
        o_us = _graph_us(one_shot, x.clone(), 32, 20)
        row = {"rows": rows, "bytes": rows * HIDDEN * 2, "nccl_us": round(n_us, 2), "one_shot_us": round(o_us, 2),
               "speedup": round(n_us / o_us, 2), "exact_vs_nccl": exact, "ranks_bit_identical": same}
        rows_out.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
    if rank == 0 and out_path:
        Path(out_path).write_text(json.dumps({"world": world, "device": torch.cuda.get_device_name(0),
                                              "torch": torch.__version__, "hidden": HIDDEN, "rows": rows_out},
                                             indent=1))
    dist.barrier()
    dist.destroy_process_group()


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
