"""Two settings of a module-level switch as paired legs in one process (H200): by default (``--switch gdn``) the Gated
DeltaNet decode paths (Qwen3-Next-80B-A3B shape, 8 layers). (Run s29d, at f40c4225, timed a
``moe_route`` switch, the gpt-oss router on the routing kernel or torch.topk + softmax: bench/NOTES-moe.md; the kernel
won and the switch is gone. Run s34b, at 9820b254, timed ``moe_tiles``, three narrower sorted-path tiles among the
small-batch MoE candidates: 0.995x at gpt-oss-20b bs1, gone too. Add a ``SWITCHES`` entry for the next flag.)

Legs: ``fused`` (``runtime/layers/gated_deltanet/kernels.FUSED_DECODE = True``: conv update, then the delta rule with its
gates computed in the same kernel: two launches per GDN layer before the gated norm) and ``unfused`` (the four-launch
chain: seq-id arange, gating, conv, delta rule). (Run s29b timed an earlier fused leg that also took the gated norm
in, one program per (row, head): bench/NOTES-gdn.md.) Both engines are loaded and their decode graphs captured
with their setting, then timed alternately (A B, B A, ...) ``--reps`` times on the same prompts, so run-to-run drift
(the same code gave 616 and 727 tok/s in two runs of bench/moe.py) hits both legs alike; the decision uses the
per-pair ratios' median.
Each leg's 16 greedy tokens are compared with the other's, and an eager per-kernel profile
(bench.kernel_profile) of each leg at ``--profile-batches`` shows where the launches went.

decode rate = batch * (N - 1) / (T(N new tokens) - T(1 new token)), as bench/arch.py; roofline as bench/arch.py.

  python -m bench.gdn_ab --batches 1 32 --reps 5 --out bench/results/h200-qwen3-next-gdn-ab.json
"""
from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.arch import build_and_save_hf, hf_config, step_bytes  # noqa: E402
from bench.kernel_profile import kernel_profiles  # noqa: E402
from bench.common import log  # noqa: E402
from bench.decode import measure_ceilings, wall, warm_page_cache  # noqa: E402

LEGS = {"fused": True, "unfused": False}
# --switch: (model, module, attribute, shape, default layers)
SWITCHES = {
    "gdn": ("qwen3_next", "modelgen.runtime.layers.gated_deltanet.kernels", "FUSED_DECODE",
            "Qwen3-Next-80B-A3B shape", 8),
    # read at load time (process_weights_after_loading permutes and fuses the projection weights): each leg's engine
    # is built and loaded after its flip() below, so the two engines hold the two weight layouts side by side
    "gdn_proj": ("qwen3_next", "modelgen.runtime.layers.gated_deltanet.layer", "FUSED_PROJECTIONS",
                 "Qwen3-Next-80B-A3B shape", 8),
    # Read at forward time (the fold of the weights into slot E happens at load either way, values unchanged).
    "sharedslot": ("qwen3_next", "modelgen.runtime.layers.moe.shared_slot", "SHARED_SLOT",
                   "Qwen3-Next-80B-A3B shape", 8),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--switch", choices=sorted(SWITCHES), default="gdn")
    ap.add_argument("--layers", type=int, default=None, help="default: the switch's (8 GDN)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--profile-batches", type=int, nargs="*", default=[1])
    ap.add_argument("--ckpt", default=None, help="default: /tmp/modelgen-bench-<model>")
    ap.add_argument("--out", default="bench/results/h200-qwen3-next-gdn-ab.json")
    ap.add_argument("--budget-s", type=float, default=300, help="no new rep or profile past this")
    ap.add_argument("--reuse-ckpt", action="store_true",
                    help="keep a checkpoint an earlier run of the same model and layers wrote at --ckpt")
    args = ap.parse_args()
    model, module, attr, shape, layers = SWITCHES[args.switch]
    args.layers = args.layers or layers
    args.ckpt = args.ckpt or f"/tmp/modelgen-bench-{model}"
    t_start = time.perf_counter()
    left = lambda: args.budget_s - (time.perf_counter() - t_start)  # noqa: E731
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)

    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams
    import importlib

    ggd = importlib.import_module(module)
    flip = lambda on: setattr(ggd, attr, on)  # noqa: E731

    res: dict = {"gpu": torch.cuda.get_device_name(0), "model": f"{shape}, {args.layers} layers, bf16",
                 "legs": {k: f"{attr}={v}" for k, v in LEGS.items()},
                 "setup": vars(args)}
    save = lambda: out_path.write_text(json.dumps(res, indent=2))  # noqa: E731
    res.update(measure_ceilings())
    ckpt = Path(args.ckpt)
    reuse = args.reuse_ckpt and (ckpt / "config.json").exists() \
        and json.loads((ckpt / "config.json").read_text()).get("num_hidden_layers") == args.layers
    if reuse:  # the bytes a step reads need the parameter shapes only: transformers' model on the meta device
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            hf = AutoModelForCausalLM.from_config(hf_config(model, args.layers), dtype=torch.bfloat16)
    else:
        shutil.rmtree(ckpt, ignore_errors=True)
        hf = build_and_save_hf(model, args.layers, ckpt)
    res["checkpoint_reused"] = reuse
    ctx = args.prompt + args.new / 2
    copy = res["hbm_copy_tb_s"] * 1e12
    res["roofline_tok_s"] = {str(b): b * copy / step_bytes(hf, model, b, ctx)["total"] for b in args.batches}
    vocab = hf.config.vocab_size
    del hf
    gc.collect()
    torch.cuda.empty_cache()
    warm_page_cache(ckpt)
    log(res)
    save()

    gen = torch.Generator().manual_seed(1)
    prompts = {b: torch.randint(1000, vocab - 1000, (b, args.prompt), generator=gen) for b in args.batches}
    kw = dict(target="rocm", dtype="bfloat16", device="cuda", max_model_len=args.prompt + args.new + 16,
              max_num_seqs=max(args.batches))
    greedy = lambda n: SamplingParams(max_new_tokens=n, ignore_eos=True)  # noqa: E731
    llms = {}
    for leg, fused in LEGS.items():
        flip(fused)  # read while the graphs are captured: each engine replays its own path
        llm = llms[leg] = LLM(ckpt, **kw)
        llm.warmup()
        res.setdefault("tokens_bs1", {})[leg] = llm.generate(prompts[1][:1].tolist() if 1 in prompts else
                                                             prompts[args.batches[0]][:1].tolist(), greedy(16))[0]
        log(leg, "captured; 16 greedy tokens", res["tokens_bs1"][leg])
    res["tokens_equal"] = res["tokens_bs1"]["fused"] == res["tokens_bs1"]["unfused"]

    rates = {leg: {str(b): [] for b in args.batches} for leg in LEGS}
    for rep in range(args.reps):
        if left() < 20:
            res["reps_done"] = rep
            break
        order = list(LEGS) if rep % 2 == 0 else list(LEGS)[::-1]
        for b in args.batches:
            ids = prompts[b].tolist()
            for leg in order:
                flip(LEGS[leg])
                llm = llms[leg]
                llm.generate(ids, greedy(2))
                t1 = min(wall(lambda: llm.generate(ids, greedy(1))) for _ in range(2))
                tn = wall(lambda: llm.generate(ids, greedy(args.new)))
                rates[leg][str(b)].append(b * (args.new - 1) / (tn - t1))
            log(f"rep {rep} bs{b}: " + ", ".join(f"{leg} {rates[leg][str(b)][-1]:.1f}" for leg in LEGS))
        res["decode_tok_s"] = rates
        save()
    summary = {}
    for b in args.batches:
        f, u = rates["fused"][str(b)], rates["unfused"][str(b)]
        if not f:
            continue
        ratios = [x / y for x, y in zip(f, u)]
        summary[str(b)] = {"fused_median": statistics.median(f), "unfused_median": statistics.median(u),
                           "fused_over_unfused_median": statistics.median(ratios), "ratios": ratios,
                           "fused_of_roofline": statistics.median(f) / res["roofline_tok_s"][str(b)],
                           "unfused_of_roofline": statistics.median(u) / res["roofline_tok_s"][str(b)]}
    res["summary"] = summary
    save()
    del llms, llm
    gc.collect()
    torch.cuda.empty_cache()

    for leg, fused in LEGS.items():
        if not args.profile_batches or left() < 30:
            break
        flip(fused)
        res.setdefault("kernel_profile", {})[leg] = kernel_profiles(ckpt, dict(kw, max_num_seqs=max(args.batches)),
                                                                    prompts, args.profile_batches)
        gc.collect()
        torch.cuda.empty_cache()
        save()

    print(f"\n{attr} A/B ({shape}) | batch | fused | unfused | fused/unfused (median of pairs) | "
          "fused of roofline")
    for b, s in summary.items():
        print(f"  {b:>3} | {s['fused_median']:,.1f} | {s['unfused_median']:,.1f} | {s['fused_over_unfused_median']:.3f}"
              f" | {s['fused_of_roofline']:.1%}")
    print("greedy tokens equal across legs:", res["tokens_equal"])
    res["wall_s"] = time.perf_counter() - t_start
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
