"""``_align_kernel``'s two ways of giving each row block its expert, timed as paired legs in one process (H200):
``fill`` (``runtime/layers/moe/kernels.ALIGN_FILL = True``: each expert writes its own blocks) and ``count`` (every
block counts the experts ending before it, a ``[128, next_pow2(E + 1)]`` comparison per chunk of blocks). Each leg's
align call is captured 50 times into one CUDA graph and replayed, so the time is the kernel's, not its launch;
legs alternate ``--reps`` times per shape and outputs are checked equal.

  python -m bench.align_ab --out bench/results/h200-moe-align-ab.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (name, tokens, experts, top-k): the decode / prefill shapes of the MoE specs
SHAPES = [("qwen3_next_bs32", 32, 512, 10), ("qwen3_next_bs1", 1, 512, 10), ("qwen3_next_prefill2k", 2048, 512, 10),
          ("gpt_oss_bs1", 1, 32, 4), ("gpt_oss_bs32", 32, 32, 4), ("qwen3_30b_bs1", 1, 128, 8),
          ("qwen3_30b_bs32", 32, 128, 8)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--out", default="bench/results/h200-moe-align-ab.json")
    args = ap.parse_args()
    from modelgen.runtime.layers.moe import kernels as gm

    res = {"gpu": torch.cuda.get_device_name(0), "legs": {"fill": "ALIGN_FILL=True", "count": "ALIGN_FILL=False"},
           "shapes": {}}
    for name, T, E, k in SHAPES:
        ids = torch.rand(T, E, device="cuda").argsort(dim=1)[:, :k].int()
        BM = gm.default_config(T, k, E, torch.bfloat16)["BLOCK_M"]
        graphs, outs = {}, {}
        for leg, fill in (("fill", True), ("count", False)):
            gm.ALIGN_FILL = fill
            outs[leg] = gm.align(ids, T * k, k, k, 0, E, 0, BM)  # compiles
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(args.calls):
                    gm.align(ids, T * k, k, k, 0, E, 0, BM)
            graphs[leg] = g
        (s1, e1, n1, _), (s0, e0, n0, _) = outs["fill"], outs["count"]
        equal = bool(torch.equal(e1, e0) and torch.equal(n1, n0))
        us = {"fill": [], "count": []}
        for rep in range(args.reps):
            for leg in (("fill", "count") if rep % 2 == 0 else ("count", "fill")):
                g = graphs[leg]
                g.replay()
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                torch.cuda.synchronize()
                us[leg].append(a.elapsed_time(b) * 1e3 / args.calls)
        row = {"T": T, "E": E, "k": k, "BLOCK_M": BM, "outputs_equal": equal,
               "fill_us": statistics.median(us["fill"]), "count_us": statistics.median(us["count"]), "raw_us": us}
        res["shapes"][name] = row
        print(f"{name:>22} T={T:<5} E={E:<4} k={k:<3} BM={BM:<4} fill {row['fill_us']:7.2f} us  "
              f"count {row['count_us']:7.2f} us  equal {equal}", flush=True)
    gm.ALIGN_FILL = True
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
