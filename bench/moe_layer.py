"""One Qwen3-30B-A3B decode layer's kernels, timed per kernel under each launch setting (issue 10, batch-1 MoE).

A decode layer at batch 1 streams ~113 MB of active weights (27 us at the H200's copy rate) in ~10 kernels, and
measured ~70 us: fixed per-kernel costs (launch, ramp-up, tail) dominate. This script builds ``--layers`` layers of
real-size random bf16 weights (so nothing is re-read from L2 across layers), chains them exactly as the generated
rocm module runs a decode step on the GPU path --

  norm      fused residual add + RMSNorm (input_layernorm)       runtime/ops/gpu/norm.py
  qkv       fused QKV projection (skinny GEMM / GEMV / cuBLAS)   runtime/ops/gpu/linear.py (timed choice)
  attention RoPE + QK norm + KV write + paged decode (+ reduce)  runtime/layers/attention/kernels.py
  o_proj    output projection                                    runtime/ops/gpu/linear.py
  norm2     post_attention_layernorm                             runtime/ops/gpu/norm.py
  router    router GEMM + top-k (two launches, or one)           runtime/ops/gpu/{linear,moe}.py
  gate_up   expert gate-up GEMV + SiLU (pair path at bs 1)      runtime/layers/moe/kernels.py
  down      expert down GEMV + combine                           runtime/layers/moe/kernels.py

-- and replays it from a CUDA graph over all layers. Per-kernel figures are differences of graphs that run the
chain up to each kernel (with PDL they overlap, so they are shares, not isolated times); ``total`` is the whole
layer. Each setting (``--modes``) is measured in the same process on the same weights:

  base        MODELGEN_PDL=0: ordinary launches
  pdl         programmatic dependent launch (MODELGEN_PDL=1, the default)
  *_nf        the two add+RMSNorms fused into the GEMVs after them (norm1 into QKV, norm2 into the router GEMM:
              runtime/ops/gpu/norm_linear.py): the norm stages read 0, their time is in qkv / router_gemm
  pdl_fr      the router GEMM and top-k in one launch (moe.FUSED_ROUTER_T = 2)

(The release-before-wait level ``pdl2``, the pre-wait prefetch ``*_pf`` and the prefetch of a later kernel's weight
``*ahead`` were measured here and lost; their code is gone: bench/NOTES-switches.md.)

Then it checks that every setting computes bitwise the same layer outputs (graph replays on new inputs, with the
first setting's kernel choices) and prints the byte-time of each kernel's weights at ``--copy-tb-s``. At bs 8 the
``gate_up`` share includes the sorted path's align launch and ``down`` its combine launch.

  python -m bench.moe_layer --layers 8 --batches 1 8 --out bench/results/h200-moe-layer.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

H, NH, NKV, D, E, K, I, EPS = 2048, 32, 4, 128, 128, 8, 768, 1e-6
STAGES = ["norm", "qkv", "attention", "o_proj", "norm2", "router_gemm", "router_topk", "gate_up", "down"]
_OFF = dict(pdl=0, fused_router=0, nf=False)
MODES = {  # most informative first: --budget-s drops the last ones
    "base": _OFF,
    "pdl": dict(_OFF, pdl=1),
    "pdl_nf": dict(_OFF, pdl=1, nf=True),
    "pdl_fr": dict(_OFF, pdl=1, fused_router=2),
    "nf": dict(_OFF, nf=True),
}
FLAGS = {"nf": False}


def log(*a) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


class Layer:
    """One decoder layer's weights (random, scaled like transformers' std-0.02 init) and norms."""

    def __init__(self, gen: torch.Generator):
        kw = dict(device="cuda", dtype=torch.bfloat16)

        def rnd(*shape):
            return torch.randn(*shape, device="cuda", generator=gen, dtype=torch.float32).mul_(0.02).to(torch.bfloat16)

        self.ln1 = 1 + 0.1 * torch.randn(H, **kw)
        self.ln2 = 1 + 0.1 * torch.randn(H, **kw)
        self.wqkv = rnd((NH + 2 * NKV) * D, H)
        self.wo = rnd(H, NH * D)
        self.qn = 1 + 0.1 * torch.randn(D, **kw)
        self.kn = 1 + 0.1 * torch.randn(D, **kw)
        self.wr = rnd(E, H)
        self.w13 = rnd(E, 2 * I, H)
        self.w2 = rnd(E, H, I)


class Chain:
    """Static inputs and the KV cache of a batch; ``run(upto)`` launches every layer's kernels up to stage ``upto``."""

    def __init__(self, layers: list[Layer], batch: int, context: int, gen: torch.Generator):
        from modelgen.runtime.layers.rotary import get_rope

        self.layers, self.B = layers, batch
        bs = 16
        blocks = -(-(context + 1) // bs)
        self.k_cache = [torch.randn(batch * blocks, NKV, bs, D, device="cuda", dtype=torch.bfloat16, generator=gen)
                        for _ in layers]
        self.v_cache = [torch.randn_like(c) for c in self.k_cache]
        self.tables = torch.arange(batch * blocks, device="cuda", dtype=torch.int64).view(batch, blocks)
        self.ctx = torch.full((batch,), context + 1, device="cuda", dtype=torch.int64)
        self.pos = torch.full((batch,), context, device="cuda", dtype=torch.int64)
        self.slot = self.tables[:, context // bs] * bs + context % bs
        self.rope = get_rope(D, D, 40960, 1e6, None, "rotate_half").to("cuda")
        self.x = torch.randn(batch, H, device="cuda", dtype=torch.bfloat16, generator=gen)
        self.res = torch.randn(batch, H, device="cuda", dtype=torch.bfloat16, generator=gen)
        self.out = None

    def run(self, upto: str) -> None:
        from modelgen.runtime.layers.attention import kernels as ga
        from modelgen.runtime.layers.moe import kernels as gm
        from modelgen.runtime.ops.gpu import norm as gn, norm_linear as nl
        from modelgen.runtime.ops.gpu.linear import linear

        stop = STAGES.index(upto)
        x, res = self.x, self.res
        for i, L in enumerate(self.layers):
            if FLAGS["nf"]:  # norm1 inside the QKV GEMV
                if stop < 1:
                    continue
                qkv, _, res = nl.add_rms_norm_linear(x, res, L.ln1, EPS, L.wqkv, want_normed=False)
            else:
                h, res = gn.add_rms_norm(x, res, L.ln1, EPS)
                if stop < 1:
                    continue
                qkv = linear(h, L.wqkv)
            if stop < 2:
                continue
            q, k, v = qkv.split([NH * D, NKV * D, NKV * D], dim=-1)
            a = ga.paged_decode(q.view(-1, NH, D), k.view(-1, NKV, D), v.view(-1, NKV, D), self.k_cache[i],
                                self.v_cache[i], self.tables, self.ctx, self.slot, D ** -0.5,
                                rope=(self.pos, self.rope.cos_sin_cache, D, False), qk_norm=(L.qn, L.kn, EPS, "rms"))
            if stop < 3:
                continue
            o = linear(a.view(self.B, NH * D), L.wo)
            if stop < 4:
                continue
            route_kw = dict(scoring="softmax", renormalize=True, out_dtype=torch.bfloat16)
            if FLAGS["nf"]:  # norm2 inside the router GEMV
                if stop < 5:
                    continue
                logits, h2, res = nl.add_rms_norm_linear(o, res, L.ln2, EPS, L.wr)
                if stop < 6:
                    continue
                w, ids = gm.route(logits, K, **route_kw)
            else:
                h2, res = gn.add_rms_norm(o, res, L.ln2, EPS)
                if stop < 5:
                    continue
                if stop < 6:
                    linear(h2, L.wr)
                    continue
                w, ids = gm.router(h2, L.wr, K, gemm=linear, **route_kw)
            if stop < 7:
                continue
            # stages=2: the pair path's gate-up launch (bs 8's sorted path: align + gate-up); 4: the whole op
            x = gm.fused_moe(h2, L.w13, L.w2, w, ids, stages=2 if stop < 8 else 4)
        self.out = (x, res)


def graph_us(fn, reps: int) -> float:
    """Median us of one replay of a CUDA graph capturing ``fn()`` (warmed outside the capture)."""
    from bench.moe import graph_ms

    return graph_ms(fn, reps) * 1e3


def set_mode(m: dict) -> None:
    from modelgen.runtime.layers.moe import kernels as gm
    from modelgen.runtime.ops.gpu import linear as gl, pdl

    pdl.set_mode(pdl=m["pdl"])
    gm.FUSED_ROUTER_T = m["fused_router"]
    FLAGS["nf"] = m["nf"]
    gl._CHOICE.clear()  # re-time cuBLAS / skinny / GEMV under this setting (PDL favours the Triton kernels)
    gm._CHOICE.clear()


def byte_us(copy_tb_s: float, distinct: float) -> dict:
    b = {"qkv": (NH + 2 * NKV) * D * H, "o_proj": NH * D * H, "router_gemm": E * H,
         "gate_up": distinct * 2 * I * H, "down": distinct * H * I}
    return {k: 2 * v / (copy_tb_s * 1e12) * 1e6 for k, v in b.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--context", type=int, default=192)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--stages", action=argparse.BooleanOptionalAction, default=True,
                    help="per-kernel shares (one graph per stage prefix); --no-stages times the whole layer only")
    ap.add_argument("--copy-tb-s", type=float, default=4.2, help="copy rate for the byte-times (H200: 4.17-4.23)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--budget-s", type=float, default=400, help="settings not started by then are skipped")
    args = ap.parse_args()
    t0 = time.perf_counter()
    import triton

    from modelgen.runtime.layers.moe import kernels as gm
    from modelgen.runtime.ops.gpu import linear as gl, pdl

    cap = torch.cuda.get_device_capability()
    res: dict = {"gpu": torch.cuda.get_device_name(0), "capability": list(cap),
                 "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__},
                 "shape": dict(H=H, heads=NH, kv_heads=NKV, head_dim=D, experts=E, top_k=K, moe_intermediate=I),
                 "layers": args.layers, "context": args.context, "modes": {}}
    if cap[0] < 9:
        log(f"sm_{cap[0]}{cap[1]}: PDL needs sm_90+; the pdl modes run as base")
    gen = torch.Generator(device="cuda").manual_seed(0)
    layers = [Layer(gen) for _ in range(args.layers)]
    gb = sum(t.numel() * 2 for L in layers for t in vars(L).values()) / 1e9
    log(f"{args.layers} layers of weights ({gb:.1f} GB)")
    chains = {b: Chain(layers, b, args.context, gen) for b in args.batches}
    choices: dict = {}

    def time_mode(name: str, entry: dict) -> None:
        for b, ch in chains.items():
            stage_us = {}
            if args.stages:
                prev = 0.0
                for s in STAGES:
                    t = graph_us(lambda s=s: ch.run(s), args.reps) / args.layers
                    stage_us[s] = t - prev
                    prev = t
                total = prev
            else:
                total = graph_us(lambda: ch.run(STAGES[-1]), args.reps) / args.layers
            entry[str(b)] = {"total_us_per_layer": total, "stage_us_per_layer": stage_us,
                             "linear_choices": {str(k_[:3]): v for k_, v in gl._CHOICE.items() if k_[0] == b},
                             "moe_choice": {str(k_[:5]): v for k_, v in gm._CHOICE.items() if k_[0] == b},
                             "moe_path_timings_ms": {str(k_[:3]): v for k_, v in gm.TIMINGS.items() if k_[0] == b}}
            log(f"{name:10s} bs{b}: total {total:6.1f} us/layer | "
                + " ".join(f"{s} {v:.1f}" for s, v in stage_us.items()))
            log(f"{'':10s}       linear {entry[str(b)]['linear_choices']} moe {entry[str(b)]['moe_choice']}")
            for key, t in entry[str(b)]["moe_path_timings_ms"].items():
                log(f"{'':10s}       moe paths {key}: " + ", ".join(f"{n} {v * 1e3:.1f} us" for n, v in t.items()))

    def save() -> None:
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(res, indent=2))

    for name in args.modes:
        m = MODES[name]
        if time.perf_counter() - t0 > args.budget_s:
            res.setdefault("skipped_by_budget", []).append(name)
            log(f"{name}: skipped (past --budget-s {args.budget_s:.0f})")
            continue
        set_mode(m)
        entry = res["modes"][name] = {"setting": m, "pdl_active": pdl.active(torch.device("cuda"))}
        try:
            time_mode(name, entry)
        except Exception as e:  # e.g. a driver refusing programmatic edges in a capture: record, go on
            entry["error"] = f"{type(e).__name__}: {e}"[:500]
            log(f"{name}: FAILED {entry['error']}")
            save()
            continue
        choices[name] = (dict(gl._CHOICE), dict(gm._CHOICE))
        save()
    for b in args.batches:
        res.setdefault("byte_time_us_per_layer", {})[str(b)] = byte_us(args.copy_tb_s, E * (1 - (1 - K / E) ** b))

    # PDL changes when work starts, never what it computes: under the first setting's kernel
    # choices, a captured chain of all layers replayed on new inputs gives bitwise the same outputs with each
    # setting as with that setting's launches made ordinary (a missing wait would show here as a race).
    def replays(ch, m: dict) -> list[torch.Tensor]:
        set_mode(m)
        first = next(iter(choices.values()))
        gl._CHOICE.update(first[0])
        gm._CHOICE.update(first[1])
        ch.run(STAGES[-1])
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            ch.run(STAGES[-1])
        outs = []
        for i in range(3):
            ch.x.copy_(torch.randn(ch.x.shape, device="cuda", generator=torch.Generator("cuda").manual_seed(i)))
            g.replay()
            torch.cuda.synchronize()
            outs.append(torch.cat([ch.out[0], ch.out[1]], dim=1).clone())
        del g
        return outs

    failed = []
    for b, ch in chains.items():
        for name in args.modes:
            m = MODES[name]
            if not m["pdl"] or name not in choices:
                continue
            try:
                want = replays(ch, dict(m, pdl=0))  # nf / fused router kept
                got = replays(ch, m)
            except Exception as e:  # recorded as a failed check, the table still prints
                res["modes"][name][str(b)]["check_error"] = f"{type(e).__name__}: {e}"[:500]
                log(f"check {name:10s} bs{b}: FAILED {type(e).__name__}: {str(e)[:200]}")
                failed.append(f"{name} bs{b}")
                continue
            same = all(torch.equal(x, w) for x, w in zip(got, want))
            res["modes"][name][str(b)]["bitwise_equal_without_pdl"] = same
            log(f"check {name:10s} bs{b}: 3 replays bitwise equal to the same kernels without PDL: {same}")
            if not same:
                failed.append(f"{name} bs{b}")
    timed = [n for n in args.modes if n in choices]
    print("\nus/layer         " + " | ".join(f"{n:>9s}" for n in timed))
    for b in args.batches:
        for s in (STAGES if args.stages else []) + ["total"]:
            vals = []
            for n in timed:
                e = res["modes"][n][str(b)]
                vals.append(e["total_us_per_layer"] if s == "total" else e["stage_us_per_layer"][s])
            print(f"bs{b} {s:12s}" + " | ".join(f"{v:9.1f}" for v in vals))
    print("byte-time us/layer:", json.dumps({b: {k: round(v, 1) for k, v in d.items()}
                                             for b, d in res["byte_time_us_per_layer"].items()}))
    if 1 in args.batches and timed:
        # What a 24-layer bs-1 step would take (bench/moe.py's model: 24 of the 48 layers + lm_head at its measured
        # 140 us; the embedding / sampling / host share is not in it) against the active-weight roofline there
        # (3.353 GB per step at --copy-tb-s).
        roof_ms = 3.353e9 / (args.copy_tb_s * 1e12) * 1e3
        for n in timed:
            step = (24 * res["modes"][n]["1"]["total_us_per_layer"] + 140) / 1e3
            res["modes"][n]["1"]["projected_24_layer_step_ms"] = step
            print(f"bs1 {n:14s} projected step {step:.3f} ms = {roof_ms / step:.1%} of the roofline "
                  f"({roof_ms:.2f} ms; goal 60%: <= {roof_ms / 0.6:.2f} ms)")
    res["wall_s"] = time.perf_counter() - t0
    log(f"done in {res['wall_s']:.0f}s")
    save()
    if failed:
        log("NOT bitwise equal without PDL:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
