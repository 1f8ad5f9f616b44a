"""Speculative decoding against acceptance, with an oracle draft (issue 29, item 4): tokens/s of greedy speculative
decoding over plain greedy decoding of the same target, in the same process, at fixed draft acceptance.

A random model's own drafts are accepted at random rates (bench/mtp.py trains its MTP head to reach any), so this
bench fixes the acceptance instead: the checkpoint's MTP head still runs every draft step (its cost is measured), but
``SpeculativeDecoder.propose_override`` replaces each proposal, on the device, by the target's own greedy token with
probability ``p`` and by a wrong token otherwise. The target's greedy tokens come from the plain leg of the same
prompts. For them to stay the target's tokens in the speculative run, greedy decoding must not hinge on bf16
near-ties (a random model's top-2 logits often differ by less than a verify window's rounding moves them, after
which the two runs continue differently): the target's embedding is scaled to unit RMS and its LM head made a
permutation of the embedding, so each token's successor is a fixed random permutation of the vocabulary with a
margin of hundreds of logit units over the runner-up. Every layer still runs on real activations (attention over the
context, MoE routing by token), so the cost per step is what any weights of this shape cost.

Legs, per model (``--models``: the DeepSeek-V3 and Qwen3-Next structures at width 2048, ``--layers`` deep), per draft
count K (one engine each, ``max_num_seqs`` = the largest batch), per batch and per ``p``: the speculative leg (the
default device-resident path: drafts stay on the device, one device-to-host read per step) right after a plain leg
of the same batch on a plain engine kept alongside (paired legs; ``--reps`` repeats of each, medians); with
``--host-k``, the same rows with the drafts read back after each draft step (the path before this change: graphs
without the LM head, ``resident=False``). Each row records tokens/s, the paired plain tokens/s, the speed-up, the
measured acceptance rate (accepted / proposed drafts), mean tokens per verify step and whether every row's tokens
equal the plain leg's; with ``--components``, the GPU time of each graph a step replays (the host time a step adds
is its wall time less their sum). With ``--gdn-legs`` (Qwen3-Next on a GPU), every resident row is also run, right
after it, with the verify graph recaptured in each named variant of its Gated DeltaNet path: ``no-ck`` (the window
kernel without per-token state checkpoints: a rejection restores a snapshot and re-advances through the verify
graph); the components of each variant's graphs are timed too. ``--switch-legs NAME`` pairs each resident row the
same way with a SWITCHES flag off (none now: s34s's ``ring``, a ring of pinned host buffers per step-graph bucket,
won no row -- Qwen3-Next bs8 p0.9 0.92x against 1.38x without -- and went: bench/NOTES-mtp.md). ``--timeline``:
each resident row also records a device-side timeline of its steps, GPU time per phase and GPU gaps between phases
(bench/spec_timeline.py). (A ``no-overlap`` variant -- s32a's A/B of the chained draft graph advancing its own
inputs -- and a ``loop`` variant -- the GDN layers once per token slot, the code before ``window_decode`` -- lost in
s31a / s31b and went with its switch.)

  python bench/spec_oracle.py --models deepseek qwen3_next --layers 8 --batches 1 8 --k 1 2 3 \\
      --p 0.5 0.7 0.8 0.9 --out bench/results/h200-spec-oracle.json
  python bench/spec_oracle.py --size tiny --device cpu --k 2 --p 0.8 --new-tokens 16 --reps 1   # CPU smoke test
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.mtp import SHAPES, build, free_memory, log, write_head  # noqa: E402
from modelgen.runtime.engine.llm import LLM  # noqa: E402
from modelgen.runtime.engine.sampler import SamplingParams  # noqa: E402
from modelgen.runtime.engine import speculative  # noqa: E402

# --switch-legs: module-level switches of the speculative step (issue 29 item 4), each timed off right after the
# default row it pairs with (graphs recaptured with the switch off, then back on): name -> (module, attribute).
SWITCHES: dict[str, tuple[str, str]] = {}


def cycle_weights(seed: int, dtype: torch.dtype | None = None):
    """``edit(hf)`` for :func:`bench.mtp.build`: embedding x50 (RMS ~1, the largest share of the residual stream),
    LM head row ``v`` = the (unscaled) embedding of the token whose successor is ``v`` along one random cycle through
    the vocabulary -- greedy decoding then follows the cycle with a wide margin."""
    def edit(hf) -> None:
        emb = hf.model.embed_tokens.weight
        V = emb.shape[0]
        order = torch.randperm(V, generator=torch.Generator().manual_seed(seed))
        prev = torch.empty(V, dtype=torch.long)
        prev[order.roll(-1)] = order  # prev[v]: the token v follows
        with torch.no_grad():
            hf.lm_head.weight.copy_(emb[prev.to(emb.device)])
            emb.mul_(50.0)
        if dtype is not None:
            hf.to(dtype)  # the checkpoint in the served dtype: half the bytes to write and read back
    return edit


def make_checkpoint(kind: str, args, root: Path) -> Path:
    path = root / kind
    hf, head = build(kind, args.size, path, args.device, seed=args.seed, layers=args.layers,
                     edit=cycle_weights(args.seed, getattr(torch, args.dtype)))
    write_head(path, kind, head, hf.config.num_hidden_layers)
    del hf, head
    free_memory()
    return path


class Oracle:
    """``propose_override``: draft j of a request is its plain greedy token at that index with probability ``p``,
    else that token + 1 (a wrong one); one seeded coin per proposal."""

    def __init__(self, truth: dict[tuple[int, ...], list[int]], p: float, vocab: int, seed: int):
        self.truth, self.p, self.vocab = truth, p, vocab
        self.rng = random.Random(seed)

    def __call__(self, requests, j: int) -> list[int]:
        out = []
        for r in requests:
            ref = self.truth[tuple(r.prompt)]
            n = len(r.output) + j
            t = ref[n] if n < len(ref) else 0
            out.append(t if self.rng.random() < self.p else (t + 1) % self.vocab)
        return out


def timed(llm, prompts, new: int, reps: int, device: str) -> tuple[float, list[list[int]], dict]:
    """Median tokens/s of ``reps`` greedy generate calls (EOS ignored), the last call's tokens and stats."""
    params = SamplingParams(max_new_tokens=new, ignore_eos=True)
    llm.generate(prompts, SamplingParams(max_new_tokens=4, ignore_eos=True))  # warm-up
    rates, outs, stats = [], None, {}
    for _ in range(reps):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        rates.append(sum(map(len, outs)) / (time.perf_counter() - t0))
        stats = llm.stats.as_dict()
    return statistics.median(rates), outs, stats


def engine(path: Path, args, k: int | None) -> LLM:
    llm = LLM(path, dtype=args.dtype, device=args.device, max_num_seqs=max(args.batches),
              max_model_len=args.prompt_len + args.new_tokens + 16, speculative_tokens=k, num_blocks=args.num_blocks)
    llm.warmup()
    return llm


def replay_ms(replay, reps: int = 30) -> float:
    """Median milliseconds of one replay of a captured graph, back to back (GPU time, no host work between)."""
    replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times)


def components(plain, llm, b: int) -> dict | None:
    """GPU milliseconds of each graph a step replays at batch ``b`` (static inputs of the last step run): the plain
    decode step, the verify step, the draft's settling step and one chained draft step. A speculative step replays
    verify + settle + (K - 1) chained; its wall time less that sum is host time the GPU waited."""
    graphs = getattr(plain.runner, "graphs", None)
    dec = llm.speculative
    if graphs is None or dec.verify_graphs is None:
        return None
    bucket = graphs.bucket_for(b)
    out = {"plain_decode": replay_ms(graphs._buckets[bucket].graph.replay)}
    steps = (("verify", dec.verify_graphs), ("draft_settle", dec.draft_graphs), ("draft_chain", dec.chain_graphs))
    for name, g in steps:
        if g is not None:
            bk = g._buckets.get(next(x for x in g.buckets if b <= x))
            out[name] = replay_ms(bk.replay) if bk is not None else None
    k = dec.k
    out["spec_gpu_sum"] = out["verify"] + out["draft_settle"] + (k - 1) * (out.get("draft_chain") or 0.0)
    return out


def host_profile(llm, prompts, truth, vocab: int, args) -> dict:
    """Host milliseconds per speculative step in each labelled part of ``SpeculativeDecoder.step`` (torch profiler,
    CPU side; ``spec::target_forward_argmax`` includes the wait for the verify graph at the step's one read), over
    one 64-token generate call at p = 0.8. The profiler itself adds host time."""
    from torch.profiler import ProfilerActivity, profile

    llm.speculative.propose_override = Oracle(truth, 0.8, vocab, args.seed)
    params = SamplingParams(max_new_tokens=64, ignore_eos=True)
    llm.generate(prompts, params)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        llm.generate(prompts, params)
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    steps = llm.stats.as_dict().get("steps") or 1
    out = {"steps": steps, "wall_ms_per_step": 1e3 * wall / steps}
    for e in prof.key_averages():
        if e.key.startswith("spec::") or e.key in ("cudaStreamSynchronize", "cudaEventSynchronize"):
            out[e.key] = {"ms_per_step": e.cpu_time_total / 1e3 / steps, "calls": e.count}
    return out


def first_diff(a: list[list[int]], b: list[list[int]]) -> int | None:
    for x, y in zip(a, b):
        for i, (s, t) in enumerate(zip(x, y)):
            if s != t:
                return i
    return None


def _switch(name: str):
    import importlib

    mod, attr = SWITCHES[name]
    return importlib.import_module(mod), attr


def set_variant(dec, llm, variant: str, resident: bool) -> None:
    """Recapture the speculative graphs for ``variant``: ``default``; ``no-ck`` (``--gdn-legs``: the verify step's
    Gated DeltaNet window kernel without per-token state checkpoints, snapshot / re-advance); ``<switch>-off``
    (``--switch-legs``: that SWITCHES flag False while the graphs are built and the row runs; every other variant
    sets them all back True)."""
    for name in SWITCHES:
        mod, attr = _switch(name)
        setattr(mod, attr, variant != f"{name}-off")
    dec.enable_graphs(llm.loaded.options.decode_buckets, resident=resident, checkpoints=variant != "no-ck")
    dec.warmup()


def timeline(llm, prompts, new: int) -> dict:
    """``--timeline``: one more generate call of a resident row with bench/spec_timeline.py's recorder installed
    (a call of its own: the timed reps record no events)."""
    from bench.spec_timeline import Timeline

    speculative.TIMELINE = tl = Timeline()
    try:
        llm.generate(prompts, SamplingParams(max_new_tokens=new, ignore_eos=True))
    finally:
        speculative.TIMELINE = None
    return tl.report()


def run_model(kind: str, args, root: Path, results: dict) -> None:
    t0 = time.monotonic()
    gdn_legs = list(args.gdn_legs) if kind == "qwen3_next" and args.device.startswith("cuda") else []
    path = make_checkpoint(kind, args, root)
    vocab = SHAPES[kind][args.size]["vocab_size"]
    log(f"{kind}: checkpoint in {time.monotonic() - t0:.0f}s")
    gen = random.Random(args.seed)
    prompts = [[gen.randrange(3, vocab) for _ in range(args.prompt_len)] for _ in range(max(args.batches))]
    plain = engine(path, args, None)
    out = results["models"][kind] = {"layers": plain.config.num_hidden_layers, "plain": {}, "rows": []}
    truth = {}
    for b in args.batches:
        tps, toks, _ = timed(plain, prompts[:b], args.new_tokens, args.reps, args.device)
        truth.update({tuple(p): t for p, t in zip(prompts[:b], toks)})
        out["plain"][str(b)] = {"tokens_per_s": tps, "outputs": toks if b == 1 else None}
        log(f"{kind} plain bs{b}: {tps:,.0f} tok/s")
    for k in args.k:
        if time.monotonic() > args.deadline:
            out.setdefault("skipped", []).append(f"k{k}")
            continue
        llm = engine(path, args, k)
        dec = llm.speculative
        legs = [(True, p, "default") for p in args.p] + ([(False, p, "default") for p in args.host_p]
                                                          if k in args.host_k else [])
        # the switches act on the step graphs, which are CUDA graphs: no paired leg off a GPU
        extra = gdn_legs + ([f"{name}-off" for name in args.switch_legs] if args.device.startswith("cuda") else [])
        if extra:  # each resident row again in each GDN variant / with each switch off, right after it
            legs = [(True, p, v) for p in args.p for v in ["default", *extra]] + legs[len(args.p):]
        current = "default"
        for b in args.batches:
            for resident, p, variant in legs:
                if time.monotonic() > args.deadline:
                    out.setdefault("skipped", []).append(f"k{k} bs{b} p{p} {'resident' if resident else 'host'}"
                                                         f" {variant}")
                    continue
                if dec.verify_graphs is not None and (dec.resident != resident or variant != current):
                    set_variant(dec, llm, variant, resident)
                    current = variant
                base, _, _ = timed(plain, prompts[:b], args.new_tokens, args.reps, args.device)
                dec.propose_override = Oracle(truth, p, vocab, args.seed + b)
                tps, toks, stats = timed(llm, prompts[:b], args.new_tokens, args.reps, args.device)
                spec = stats.get("speculative") or {}
                ref = [truth[tuple(q)] for q in prompts[:b]]
                kind_of = "resident" if dec.resident else ("host" if dec.verify_graphs is not None else "eager")
                if variant != "default":
                    kind_of += f"-{variant}"
                row = {"k": k, "batch": b, "p": p, "path": kind_of,
                       "tokens_per_s": tps, "plain_tokens_per_s": base, "speedup": tps / base,
                       "acceptance_rate": spec.get("acceptance_rate"),
                       "mean_tokens_per_verify_step": spec.get("mean_tokens_per_verify_step"),
                       "equal_plain": toks == ref, "first_divergence": first_diff(toks, ref),
                       "graph_replays": dec.graph_replays()}
                # wall milliseconds per verify step (the prefill step included: one of ~new / tokens-per-step)
                row["ms_per_step"] = 1e3 * b * (row["mean_tokens_per_verify_step"] or 1) / tps
                row["plain_ms_per_step"] = 1e3 * b / base
                if args.timeline and kind_of.startswith("resident"):
                    row["timeline"] = (timeline(llm, prompts[:b], args.new_tokens) if args.device.startswith("cuda")
                                       else "no CUDA")
                    if isinstance(row["timeline"], dict):
                        t = row["timeline"]
                        log(f"{kind} k{k} bs{b} p{p} {kind_of} timeline: GPU busy {t['gpu_busy_ms']:.3f} ms, "
                            f"gaps {t['gpu_gap_ms']:.3f} ms; " + ", ".join(f"{n} {v:.3f}"
                                                                         for n, v in t["gpu_ms"].items()))
                out["rows"].append(row)
                log(f"{kind} k{k} bs{b} p{p} {row['path']:8s}: {tps:,.0f} tok/s vs plain {base:,.0f} = "
                    f"{row['speedup']:.2f}x, acceptance {row['acceptance_rate'] or 0:.2f}, "
                    f"{row['mean_tokens_per_verify_step'] or 0:.2f} tok/step, equal {row['equal_plain']}")
                Path(args.out).write_text(json.dumps(results, indent=2))
        if args.profile and k == max(args.k) and args.device.startswith("cuda"):
            out.setdefault("host_profile", {})[f"k{k}"] = host_profile(llm, prompts[:1], truth, vocab, args)
            log(f"{kind} k{k} host profile (bs1, p 0.8): {out['host_profile'][f'k{k}']}")
        if args.components and args.device.startswith("cuda"):
            for variant in ["default", *gdn_legs]:
                key = f"k{k}" if variant == "default" else f"k{k}-{variant}"
                if dec.verify_graphs is not None and (variant != current or not dec.resident):
                    set_variant(dec, llm, variant, True)
                    current = variant
                out.setdefault("components_ms", {})[key] = {str(b): components(plain, llm, b) for b in args.batches}
                log(f"{kind} {key} graph replay ms: {out['components_ms'][key]}")
            Path(args.out).write_text(json.dumps(results, indent=2))
        for name in SWITCHES:  # back to the defaults for the next K's engine
            mod, attr = _switch(name)
            setattr(mod, attr, True)
        del llm, dec
        free_memory()
    del plain
    free_memory()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["deepseek", "qwen3_next"], choices=list(SHAPES))
    ap.add_argument("--size", choices=["h200", "tiny"], default="h200")
    ap.add_argument("--layers", type=int, default=8, help="target depth (>= 8: the issue's deeper target)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--k", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--p", type=float, nargs="+", default=[0.5, 0.7, 0.8, 0.9],
                    help="probability that each oracle draft is the target's greedy token")
    ap.add_argument("--host-k", type=int, nargs="*", default=[3], help="also time these K on the host-read path")
    ap.add_argument("--host-p", type=float, nargs="*", default=[0.8])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=192)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--num-blocks", type=int, default=512, help="KV blocks of each engine (two live at once)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", type=int, default=0, choices=[0, 1],
                    help="on a GPU, a host profile of the largest K's steps at batch 1 (host_profile())")
    ap.add_argument("--components", type=int, default=1, choices=[0, 1],
                    help="on a GPU, also time each graph a step replays (components())")
    ap.add_argument("--gdn-legs", nargs="*", default=[], choices=["no-ck"],
                    help="Qwen3-Next on a GPU: pair each resident row with these variants of the verify step's GDN "
                         "path (set_variant())")
    ap.add_argument("--switch-legs", nargs="*", default=[], choices=sorted(SWITCHES),
                    help="pair each resident row with the same row with this SWITCHES flag off (set_variant())")
    ap.add_argument("--timeline", action="store_true",
                    help="on a GPU, each resident row also gets a per-phase CUDA-event timeline of its steps "
                         "(bench/spec_timeline.py; 'no CUDA' on the CPU)")
    ap.add_argument("--budget-s", type=float, default=None)
    ap.add_argument("--out", default="bench/results/h200-spec-oracle.json")
    args = ap.parse_args()
    args.deadline = time.monotonic() + args.budget_s if args.budget_s else float("inf")
    warnings.simplefilter("ignore")
    results = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
               "torch": torch.__version__, "args": {k: v for k, v in vars(args).items() if k != "deadline"},
               "models": {}}
    if args.timeline and not args.device.startswith("cuda"):
        results["timeline"] = "no CUDA: --timeline skipped (CUDA events)"
        log(results["timeline"])
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.models:
            run_model(kind, args, Path(tmp), results)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"\n{'model':11s} {'K':>2s} {'bs':>3s} {'p':>4s} {'path':8s} {'tok/s':>8s} {'plain':>8s} {'x':>5s} "
          f"{'acc':>5s} {'tok/step':>8s} equal")
    for kind, m in results["models"].items():
        for r in m["rows"]:
            print(f"{kind:11s} {r['k']:2d} {r['batch']:3d} {r['p']:4.2f} {r['path']:8s} {r['tokens_per_s']:8,.0f} "
                  f"{r['plain_tokens_per_s']:8,.0f} {r['speedup']:5.2f} {r['acceptance_rate'] or 0:5.2f} "
                  f"{r['mean_tokens_per_verify_step'] or 0:8.2f} {r['equal_plain']}")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
