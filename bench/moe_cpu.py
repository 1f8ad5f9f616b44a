"""CPU time of one MoE layer: modelgen.runtime.layers.moe.ops (route + fused_moe) vs transformers'
Qwen3MoeSparseMoeBlock.

Qwen3-MoE-like layer (H=1024, I=768 per expert, E=64, top_k=8), float32, 2 intra-op threads, median of N runs.
HF is timed with both experts implementations: "eager" (per-expert loop, index_add_) and "grouped_mm" (the default a
full model picks in transformers 5.x). Run: ``cd /work/main && PYTHONPATH=. python bench/moe_cpu.py [--runs 9]``.
"""
from __future__ import annotations

import argparse
import os
import copy
import statistics
import time

import torch
import torch.nn.functional as F
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

from modelgen.runtime.layers.moe.ops import fused_moe, fused_moe_static, route


def interleaved_median_ms(fns: dict, runs: int, warmup: int = 2) -> dict:
    """Median wall time per candidate; candidates alternate within each round so background load hits all alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    for r in range(runs):
        names = list(fns)
        names = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
        for name in names:
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, nargs="+", default=[128, 1])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    cfg = Qwen3MoeConfig(hidden_size=1024, moe_intermediate_size=768, num_experts=64, num_experts_per_tok=8,
                         norm_topk_prob=True)
    blocks = {}
    for impl in ("eager", "grouped_mm"):
        c = copy.deepcopy(cfg)
        c._experts_implementation = impl
        blocks[impl] = Qwen3MoeSparseMoeBlock(c).eval()
    base = blocks["eager"]
    with torch.no_grad():
        for p in base.parameters():
            p.normal_(std=0.02)
        blocks["grouped_mm"].load_state_dict(base.state_dict())
    w13, w2, router = base.experts.gate_up_proj, base.experts.down_proj, base.gate.weight

    def ours(h):
        w, ids = route(F.linear(h, router), 8, renormalize=True)
        return fused_moe(h, w13, w2, w.to(h.dtype), ids)

    def ours_static(h):
        w, ids = route(F.linear(h, router), 8, renormalize=True)
        return fused_moe_static(h, w13, w2, w.to(h.dtype), ids)

    print(f"load average before: {os.getloadavg()[0]:.2f} (on {os.cpu_count()} CPUs)")
    print(f"Qwen3-MoE-like layer H=1024 I=768 E=64 top_k=8, fp32, {args.threads} threads, median of {args.runs}")
    header = f"{'T':>5} | {'HF eager ms':>11} | {'HF grouped_mm ms':>16} | {'ours ms':>8} | {'eager/ours':>10} | " \
             f"{'grouped/ours':>12} | {'static ms':>9}"
    print(header)
    print("-" * len(header))
    with torch.no_grad():
        for T in args.tokens:
            x = torch.randn(1, T, 1024)
            h = x.view(T, 1024)
            ref = blocks["eager"](x).view(T, 1024)
            torch.testing.assert_close(ours(h), ref, atol=1e-5, rtol=1e-4)
            m = interleaved_median_ms({
                "eager": lambda: blocks["eager"](x), "grouped": lambda: blocks["grouped_mm"](x),
                "ours": lambda: ours(h), "static": lambda: ours_static(h),
            }, args.runs)
            t_eager, t_grouped, t_ours, t_static = m["eager"], m["grouped"], m["ours"], m["static"]
            print(f"{T:>5} | {t_eager:>11.2f} | {t_grouped:>16.2f} | {t_ours:>8.2f} | {t_eager / t_ours:>10.2f} | "
                  f"{t_grouped / t_ours:>12.2f} | {t_static:>9.2f}")


if __name__ == "__main__":
    main()
