"""Tensor-parallel decode benchmark: TP=1 vs TP=2 in one run, random weights from the config alone (load_dummy).

Llama-3-8B shape by default (``--size llama3-8b``), bf16, on CUDA: the rocm module with CUDA graphs and the Triton
kernels; TP=2 runs ranks the engine starts itself (``LLM(..., tensor_parallel_size=2)``, NCCL, rank r on cuda:r,
all-reduces captured in the decode graphs). Both runs load the same dummy weights (each tensor a function of its
name and the seed; ``runtime/dummy_weights.py``), so TP=2's shards are slices of TP=1's model and their greedy
tokens are comparable. Per batch size: decode tokens/s = batch * (N - 1) / (T(N new tokens) - T(1 new token)) (the
same estimator as ``bench/decode.py``), best of ``--reps``; then the speed-up TP=2 / TP=1 and the token check
(greedy continuations of ``--check-prompts`` prompts, and the max |logit| difference of one scored prompt).
``--reference-dtype float32`` makes the token check three-way: a TP=1 run in that dtype (the same dummy weights)
decides every prompt where TP=1 and TP=2 part: its logit margin between the two tokens at the first difference,
against the bf16 noise (max |logit| difference of TP=1 in ``--dtype`` and in the reference on one prompt).

``--size tiny --device cpu`` is the CPU smoke test (gloo; ``tests/test_bench_tp.py`` runs it).

  python bench/tp.py --out bench/results/h200x2-llama8b-tp.json           # on a 2-GPU machine
  python bench/tp.py --size tiny --device cpu --dtype float32 --new 8 --batches 1 2
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES = {
    # Meta-Llama-3-8B's config.json fields that shape the model
    "llama3-8b": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
        max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
        bos_token_id=128000, eos_token_id=128001, torch_dtype="bfloat16", hidden_act="silu", head_dim=128,
    ),
    # Qwen3-30B-A3B's config.json fields, 8 of its 48 layers (the MoE leg: expert parallelism over the ranks)
    "qwen3-30b-a3b-8l": dict(
        architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144,
        moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], num_hidden_layers=8, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
        tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151645, torch_dtype="bfloat16",
        hidden_act="silu", attention_bias=False, router_aux_loss_coef=0.001, output_router_logits=False,
    ),
    # the MoE leg at test size
    "tiny-moe": dict(
        architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=64, intermediate_size=128,
        moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        vocab_size=160, max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, torch_dtype="float32", hidden_act="silu",
        attention_bias=False, initializer_range=0.2,
    ),
    # the same architecture at test size
    "tiny": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=64, intermediate_size=96,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=160,
        max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, torch_dtype="float32", hidden_act="silu", initializer_range=0.2,
    ),
}


def log(*a) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def wall(fn, device: str) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


# TP=2 variants: the control plane and the all-reduce the engine uses (environment read when the ranks start)
VARIANTS = {
    "default": {},  # shared-memory step messages + one-shot all-reduce for small messages (the engine's defaults)
    "gloo-nccl": {"MODELGEN_SHM_CONTROL": "0", "MODELGEN_CUSTOM_ALLREDUCE": "0"},  # before: gloo + NCCL only
    "shm-nccl": {"MODELGEN_SHM_CONTROL": "1", "MODELGEN_CUSTOM_ALLREDUCE": "0"},
    # the all-reduces followed by a separate add + RMSNorm launch (before runtime/ops/gpu/allreduce_norm.py)
    "unfused-norm": {"MODELGEN_FUSED_ALLREDUCE_NORM": "0"},
}


def measure(tp: int, cfg_dir: Path, args, prompts: dict[int, list[list[int]]], check: list[list[int]],
            variant: str = "default") -> dict:
    """Build the engine at tensor-parallel size ``tp`` and measure every batch size; returns the figures, the
    greedy tokens of the check prompts and one prompt's logits."""
    import os

    for k in ("MODELGEN_SHM_CONTROL", "MODELGEN_CUSTOM_ALLREDUCE", "MODELGEN_FUSED_ALLREDUCE_NORM"):
        os.environ.pop(k, None)
    os.environ.update(VARIANTS[variant])
    label = f"TP={tp}" + (f" [{variant}]" if tp > 1 else "")
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams

    greedy = lambda n: SamplingParams(max_new_tokens=n, ignore_eos=True)  # noqa: E731
    t0 = time.perf_counter()
    llm = LLM(cfg_dir, target="rocm", dtype=args.dtype, device=args.device, load_format="dummy",
              tensor_parallel_size=tp, expert_parallel_size=(args.ep if tp > 1 else None), max_num_seqs=max(args.batches + [len(check)]),
              max_model_len=args.prompt + args.new + 8, progress=False)
    build_s = time.perf_counter() - t0
    out: dict = {"tensor_parallel_size": tp, "variant": variant, "environment": VARIANTS[variant],
                 "build_s": round(build_s, 2), "decode_tokens_per_s": {}}
    try:
        t0 = time.perf_counter()
        llm.warmup()  # CUDA graphs of every decode bucket (all ranks capture together)
        out["warmup_s"] = round(time.perf_counter() - t0, 2)
        if tp > 1 and args.device.startswith("cuda"):  # one symmetric-memory world per process: later runs NCCL
            from modelgen.runtime.ops.gpu import allreduce

            out["symmetric_memory"] = allreduce.in_use()
        # the token check first: its result must come back even when a later step runs out of time
        log(f"{label}: check generate")
        tokens = llm.generate(check, greedy(args.check_new))
        log(f"{label}: check score")
        logits = llm.score(check[0]).float().cpu()
        log(f"{label}: check done")
        pipelined = llm.pipelined
        legs = [("decode_tokens_per_s", pipelined)]
        if args.pipelined_ab and pipelined is not None:  # the same engine with pipelined decode off
            legs.append(("decode_tokens_per_s_unpipelined", None))
        for key, mode in legs:
            llm.pipelined = mode
            out.setdefault(key, {})
            for b in args.batches:
                ids = prompts[b]
                llm.generate(ids, greedy(2))  # kernels and GEMM choices for these shapes
                t1 = min(wall(lambda: llm.generate(ids, greedy(1)), args.device) for _ in range(args.reps))
                tn = min(wall(lambda: llm.generate(ids, greedy(args.new)), args.device) for _ in range(args.reps))
                rate = b * (args.new - 1) / (tn - t1)
                out[key][str(b)] = round(rate, 1)
                log(f"{label} batch {b}{'' if mode is not None else ' (unpipelined)'}: {rate:.1f} tok/s "
                    f"(T1 {t1 * 1e3:.1f} ms, T{args.new} {tn * 1e3:.1f} ms)")
        if args.profile_steps:  # the plain step: how much host time pipelined decode has to hide
            llm.pipelined = None
            out["profile_batch1"] = profile_steps(llm, prompts[min(args.batches)][:1], args.profile_steps, args.device)
            log(f"{label} profile (batch 1, unpipelined, per decode step, ms): {out['profile_batch1']}")
        llm.pipelined = pipelined
    finally:
        log(f"{label}: close")
        import faulthandler

        try:  # where a hung close waits, in the log (needs a real stderr: not under pytest's capture)
            faulthandler.dump_traceback_later(60, exit=False, file=sys.__stderr__)
        except (ValueError, OSError, AttributeError):
            pass
        llm.close()
        faulthandler.cancel_dump_traceback_later()
        log(f"{label}: closed")
        del llm
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return {"figures": out, "tokens": tokens, "logits": logits}


def profile_steps(llm, prompt: list[list[int]], steps: int, device: str) -> dict:
    """Where a batch-1 decode step's wall time goes on rank 0 (medians over ``steps`` decode steps, ms): the engine
    step, the step message to the followers (TP > 1), the host part of the graph launch, and the GPU time from the
    replay's start to its end (CUDA events; at TP > 1 it includes waiting for the followers at the first collective).
    ``step - gpu`` is the host time the GPU sits idle for (the step reads its token back before preparing the next)."""
    import statistics

    from modelgen.runtime.engine.sampler import SamplingParams

    if not device.startswith("cuda"):
        return {}
    runner = llm.runner
    inner = getattr(runner, "inner", runner)
    graphs = getattr(inner, "graphs", None)
    if graphs is None:
        return {"error": "no decode graphs"}
    times: dict[str, list[float]] = {"step": [], "send": [], "launch": []}
    events: list = []
    saved_run, saved_step = graphs.run, llm.scheduler.step
    ranks = getattr(runner, "ranks", None)
    saved_send = ranks.send_step if ranks is not None else None

    def timed(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                times[name].append((time.perf_counter() - t) * 1e3)
        return wrapper

    def run(*a, **k):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        out = timed("launch", saved_run)(*a, **k)
        e1.record()
        events.append((e0, e1))
        return out

    graphs.run, llm.scheduler.step = run, timed("step", saved_step)
    if ranks is not None:
        ranks.send_step = timed("send", saved_send)
    try:
        llm.generate(prompt, SamplingParams(max_new_tokens=steps + 1, ignore_eos=True))
    finally:
        graphs.run, llm.scheduler.step = saved_run, saved_step
        if ranks is not None:
            ranks.send_step = saved_send
    torch.cuda.synchronize()
    gpu = [a.elapsed_time(b) for a, b in events]
    med = lambda xs: round(statistics.median(xs), 4) if xs else None  # noqa: E731
    decode_steps = times["step"][1:]  # the first step is the prefill
    out = {"steps": len(decode_steps), "step": med(decode_steps), "gpu": med(gpu), "launch": med(times["launch"]),
           "send": med(times["send"][1:])}
    if out["step"] is not None and out["gpu"] is not None:
        out["host_exposed"] = round(out["step"] - out["gpu"], 4)
    return out


def compare(one: list[list[int]], two: list[list[int]]) -> dict:
    prefix = [_prefix(a, b) for a, b in zip(one, two)]
    return {"tokens_equal": one == two, "matching_prefix_per_prompt": prefix,
            "tokens_per_prompt": [len(t) for t in one]}


def reference_check(cfg_dir: Path, args, check: list[list[int]], one: dict, two: dict) -> dict:
    """Three-way token check: TP=1 in ``args.reference_dtype`` (the same dummy weights) judges where the TP=1 and
    TP=2 continuations in ``args.dtype`` part. Per prompt: how far each agrees with the reference; at their first
    difference d (if any) the reference's logits after ``prompt + tokens[:d]``: its own pick, and its margin between
    TP=1's token and TP=2's. ``noise``: max |logit| difference between TP=1 in ``args.dtype`` and the reference on
    the first check prompt -- a split whose |margin| is below it is a near-tie the dtype cannot decide."""
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams

    log(f"reference TP=1 {args.reference_dtype}: build")
    llm = LLM(cfg_dir, target="rocm", dtype=args.reference_dtype, device=args.device, load_format="dummy",
              tensor_parallel_size=1, max_num_seqs=len(check), max_model_len=args.prompt + args.new + 8,
              progress=False)
    try:
        ref = llm.generate(check, SamplingParams(max_new_tokens=args.check_new, ignore_eos=True))
        noise = float((llm.score(check[0]).float().cpu() - one["logits"]).abs().max())
        prompts = []
        for p, a, b, r in zip(check, one["tokens"], two["tokens"], ref):
            entry = {"tp1_matches_reference": _prefix(a, r), "tp2_matches_reference": _prefix(b, r)}
            d = _prefix(a, b)
            if d < min(len(a), len(b)):
                last = llm.score(p + a[:d])[-1].float().cpu()
                margin = float(last[a[d]] - last[b[d]])
                entry.update(first_difference=d, tp1_token=a[d], tp2_token=b[d], reference_token=int(last.argmax()),
                             reference_margin_tp1_minus_tp2=round(margin, 5), near_tie=abs(margin) <= noise)
            prompts.append(entry)
    finally:
        llm.close()
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    parted = [e for e in prompts if "first_difference" in e]
    return {"reference_dtype": args.reference_dtype, "noise_max_abs_logit_diff": round(noise, 5),
            "prompts": prompts, "parted": len(parted), "all_partings_near_ties": all(e["near_tie"] for e in parted)}


def _prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="llama3-8b")
    ap.add_argument("--device", default="cuda", help="cuda (NCCL, GPUs 0 and 1) or cpu (gloo)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    ap.add_argument("--new", type=int, default=128, help="new tokens per timed run")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2, help="the tensor-parallel size compared with 1")
    ap.add_argument("--ep", type=int, default=None,
                    help="expert_parallel_size of the TP>1 runs (MoE sizes; default: experts TP-sharded)")
    ap.add_argument("--check-prompts", type=int, default=4)
    ap.add_argument("--check-new", type=int, default=32)
    ap.add_argument("--reference-dtype", default=None, choices=["float32", "bfloat16", "float16"],
                    help="three-way token check: a TP=1 run in this dtype judges where TP=1 and TP=2 part")
    ap.add_argument("--out", type=Path, default=None, help="JSON results (default: stdout only)")
    ap.add_argument("--variants", nargs="+", default=["default"], choices=sorted(VARIANTS),
                    help="TP>1 runs, each against the same TP=1 run: default (shared-memory control + one-shot "
                         "all-reduce), gloo-nccl (the launcher before), shm-nccl, unfused-norm. Only the first TP>1 "
                         "run of a process can set up symmetric memory (runtime/ops/gpu/symmetric_memory.py SPENT): "
                         "later ones run NCCL and record symmetric_memory=false")
    ap.add_argument("--pipelined-ab", action="store_true",
                    help="also time every batch with pipelined greedy decode off (same engine, same run)")
    ap.add_argument("--profile-steps", type=int, default=0,
                    help="after the timings, break N batch-1 decode steps down on rank 0 (profile_steps)")
    args = ap.parse_args(argv)
    cfg = dict(SIZES[args.size])
    vocab = cfg["vocab_size"]
    g = torch.Generator().manual_seed(0)
    prompts = {b: torch.randint(3, vocab, (b, args.prompt), generator=g).tolist() for b in args.batches}
    check = torch.randint(3, vocab, (args.check_prompts, min(args.prompt, 32)), generator=g).tolist()
    result: dict = {
        "benchmark": "bench/tp.py", "size": args.size, "config": cfg, "device": args.device, "dtype": args.dtype,
        "prompt_tokens": args.prompt, "new_tokens": args.new, "batches": args.batches,
        "host": platform.node(), "torch": torch.__version__,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if args.device.startswith("cuda") else [],
    }
    with tempfile.TemporaryDirectory(prefix="modelgen-bench-tp-") as tmp:
        cfg_dir = Path(tmp)
        (cfg_dir / "config.json").write_text(json.dumps(cfg))  # no weights: load_format="dummy"
        one = measure(1, cfg_dir, args, prompts, check)
        result["tp1"] = one["figures"]
        for variant in args.variants:
            two = measure(args.tp, cfg_dir, args, prompts, check, variant)
            key = f"tp{args.tp}" + ("" if variant == "default" else f"_{variant}")
            rate1, rate2 = one["figures"]["decode_tokens_per_s"], two["figures"]["decode_tokens_per_s"]
            u1 = one["figures"].get("decode_tokens_per_s_unpipelined")
            u2 = two["figures"].get("decode_tokens_per_s_unpipelined")
            if u1 and u2:
                two["figures"]["speedup_unpipelined"] = {b: round(u2[b] / u1[b], 4) for b in u2}
            result[key] = {**two["figures"], "speedup": {b: round(rate2[b] / rate1[b], 4) for b in rate2},
                           "check": {**compare(one["tokens"], two["tokens"]),
                                     "max_abs_logit_diff": float((one["logits"] - two["logits"]).abs().max()),
                                     "logit_scale": float(one["logits"].abs().max())}}
            if variant == "default":
                result["speedup"], result["check"] = result[key]["speedup"], result[key]["check"]
                if args.reference_dtype:
                    result["check"]["three_way"] = reference_check(cfg_dir, args, check, one, two)
            _write(result, args.out)  # after every run: a later timeout keeps what was measured
    print(json.dumps(result, indent=1))
    return 0


def _write(result: dict, out: Path | None) -> None:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
