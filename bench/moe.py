"""MoE decode benchmark: modelgen's rocm module (Triton fused MoE + CUDA graphs) vs transformers, Qwen3-30B-A3B shape.

One run, one GPU:
  * the HBM copy rate (bytes read + written by a large device-to-device copy) and the bf16 matmul peak;
  * a random bf16 Qwen3-30B-A3B-shaped model (``--layers`` of its 48 layers; 128 experts, top-8, moe_intermediate
    768, 32 heads / 4 KV heads, head_dim 128, vocab 151936) built by transformers (its own initialisation, std 0.02)
    and written with ``save_pretrained``; modelgen loads that checkpoint, transformers keeps the model it wrote;
  * decode tokens/s at each batch (prompt 128, ``--new`` tokens; rate = batch * (N - 1) / (T(N) - T(1)), the same
    formula for every system) for modelgen, transformers eager (its default ``grouped_mm`` experts) and, time
    permitting, transformers' static cache (compiled decode step);
  * the active-weight roofline: bytes one decode step must read (attention, router, the experts the batch touches,
    lm_head; plus the KV cache) over the measured copy rate. At batch 1 that is the 8 routed experts per layer; at
    batch b the expected number of distinct experts is E * (1 - (1 - k/E)^b) (uniform routing, as random weights give);
  * a per-layer profile of the MoE block (router GEMM + top-k, align, gate-up, down, combine) replayed from CUDA
    graphs over all layers' real weights, against the byte-time of the weights each stage reads, and a sweep of
    block-size configurations of the fused kernels per batch.

Writes ``--out`` (JSON, rewritten after every phase so a cut run keeps what it measured) and a PNG beside it.

  python -m bench.moe --layers 24 --out bench/results/h200-qwen3-30b-a3b-moe.json
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import log  # noqa: E402
from bench.decode import hf_generate, measure_ceilings, wall, warm_page_cache  # noqa: E402
from modelgen import settings  # noqa: E402

QWEN3_30B_A3B = dict(
    architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144,
    num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128, vocab_size=151936,
    num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True, decoder_sparse_step=1,
    mlp_only_layers=[], max_position_embeddings=40960, rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
    attention_bias=False, use_sliding_window=False, hidden_act="silu", bos_token_id=151643, eos_token_id=151645,
)


# ------------------------------------------------------------------------------------------------------------ bytes
def step_bytes(cfg: dict, batch: int, context: float) -> dict:
    """Bytes one decode step reads (bf16): weights of attention, router, the experts the batch touches (expected
    distinct count under uniform routing), lm_head; and the KV cache of ``batch`` sequences at ``context`` tokens."""
    H, L, V, D = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"], cfg["head_dim"]
    E, k, I = cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"]
    q, kv = cfg["num_attention_heads"] * D, cfg["num_key_value_heads"] * D
    attn = H * (q + 2 * kv) + q * H + 2 * D + 2 * H  # qkv, o, q/k norms, the two layer norms
    router = E * H
    expert = 3 * H * I
    distinct = E * (1 - (1 - k / E) ** batch)
    weights = 2 * (L * (attn + router + distinct * expert) + V * H + H)
    kv_cache = 2 * batch * context * L * 2 * kv
    return {"weights": weights, "kv_cache": kv_cache, "total": weights + kv_cache, "distinct_experts": distinct,
            "per_layer_attention": 2 * attn, "per_layer_router": 2 * router, "per_expert": 2 * expert,
            "lm_head": 2 * V * H}


# ----------------------------------------------------------------------------------------------------- transformers
def build_and_save_hf(cfg: dict, path: Path):
    """transformers' Qwen3MoeForCausalLM with its own random initialisation, on the GPU in bf16, saved to ``path``."""
    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen3MoeConfig

    hcfg = Qwen3MoeConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    torch.manual_seed(0)
    with torch.device("cuda"):
        hf = AutoModelForCausalLM.from_config(hcfg, dtype=torch.bfloat16)
    hf.eval().requires_grad_(False)
    hf.save_pretrained(path)
    hf.generation_config = GenerationConfig(bos_token_id=cfg["bos_token_id"], eos_token_id=None, pad_token_id=0,
                                            do_sample=False)
    return hf


# ----------------------------------------------------------------------------------------------------------- timing
def graph_ms(fn, reps: int = 20) -> float:
    """Median ms of one replay of a CUDA graph that runs ``fn()`` once (compiled and warmed outside the capture)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    del g
    return statistics.median(times)


def moe_profile(llm, batches: list[int], copy_tb_s: float, configs: list[dict]) -> dict:
    """Per-layer time of each MoE stage (graph replays over every layer's real weights, so no weight is re-read
    from L2), the byte-time of what each stage must read, and the fused op's time under alternative block configs."""
    from modelgen.runtime.layers.linear import linear
    from modelgen.runtime.layers.moe import kernels as gm

    blocks = [layer.mlp for layer in llm.model.model.layers if hasattr(layer.mlp, "experts")]
    nl = len(blocks)
    H = blocks[0].experts.w13_weight.shape[2]
    I = blocks[0].experts.intermediate_size
    k = blocks[0].gate.top_k
    E = blocks[0].experts.num_experts
    out: dict = {}
    for b in batches:
        xs = [torch.randn(b, H, device="cuda", dtype=torch.bfloat16) for _ in blocks]
        routed = [blk.gate(x) for blk, x in zip(blocks, xs)]
        distinct = statistics.mean(len(torch.unique(ids)) for _, ids in routed)

        def run(stages: int, cfg=None):
            def f():
                for blk, x, (w, ids) in zip(blocks, xs, routed):
                    if stages == 0:
                        blk.gate(x)
                    elif stages == -1:
                        linear(x, blk.gate.weight)
                    else:
                        ex = blk.experts
                        gm.fused_moe(x, ex.w13_weight, ex.w2_weight, w, ids, stages=stages, config=cfg)
            return f

        t = {name: graph_ms(run(s)) / nl * 1e3 for name, s in
             (("router_gemm", -1), ("router", 0), ("align", 1), ("align+gate_up", 2), ("align+gate_up+down", 3),
              ("experts_total", 4))}
        stage_us = {  # router: GEMM + top-k (one launch up to gm.FUSED_ROUTER_T tokens, else two)
            "router": t["router"], "align": t["align"],
            "gate_up": t["align+gate_up"] - t["align"], "down": t["align+gate_up+down"] - t["align+gate_up"],
            "combine": t["experts_total"] - t["align+gate_up+down"],
        }
        byte_us = {  # weights each stage must stream, at the measured copy rate
            "router_gemm": 2 * E * H / copy_tb_s / 1e6,
            "gate_up": distinct * 2 * 2 * I * H / copy_tb_s / 1e6,
            "down": distinct * 2 * H * I / copy_tb_s / 1e6,
        }
        sweep = {}
        for cfg in configs:
            if cfg.get("pairs") and b > 8:
                continue
            kind = "pairs" if cfg.get("pairs") else f"M{cfg['BLOCK_M']}"
            name = f"{kind}-up{'x'.join(map(str, cfg['up']))}-down{'x'.join(map(str, cfg['down']))}"
            try:
                sweep[name] = graph_ms(run(4, cfg)) / nl * 1e3
            except Exception as e:  # a config the compiler refuses (shared memory): record, go on
                sweep[name] = f"{type(e).__name__}: {str(e)[:120]}"
        default = gm._CHOICE.get((b, k, E, H, I, torch.bfloat16, routed[0][0].dtype, xs[0].device)) \
            or gm.default_config(b, k, E, torch.bfloat16)
        out[str(b)] = {
            "distinct_experts_per_layer": distinct, "stage_us_per_layer": stage_us,
            "router_gemm_alone_us_per_layer": t["router_gemm"], "moe_block_us_per_layer":
            t["router"] + t["experts_total"], "weight_byte_time_us_per_layer": byte_us,
            "experts_fraction_of_byte_time": (byte_us["gate_up"] + byte_us["down"]) / t["experts_total"],
            "default_config": default, "config_sweep_us_per_layer": sweep,
        }
        log(f"  profile bs{b}: " + ", ".join(f"{n} {v:.1f}" for n, v in stage_us.items())
            + f" us/layer; experts byte-time {byte_us['gate_up'] + byte_us['down']:.1f} us; distinct {distinct:.1f}")
        good = {n: v for n, v in sweep.items() if isinstance(v, float)}
        if good:
            best = min(good, key=good.get)
            log(f"    sweep best {best}: {good[best]:.1f} us/layer (default {t['experts_total']:.1f})")
    return out


SWEEP = [
    dict(pairs=True, up=(16, 256, 4, 3), down=(32, 256, 4, 3)),
    dict(pairs=True, up=(32, 128, 4, 3), down=(16, 256, 4, 3)),
    dict(pairs=True, up=(8, 256, 4, 3), down=(64, 128, 4, 3)),
    dict(pairs=True, up=(16, 128, 4, 1), down=(32, 128, 4, 1)),
    dict(pairs=True, up=(16, 256, 4, 3), down=(8, 1024, 4, 1)),
    dict(pairs=True, up=(16, 256, 4, 3), down=(16, 512, 4, 2)),
    dict(BLOCK_M=16, up=(32, 128, 4, 4), down=(64, 128, 4, 4)),
    dict(BLOCK_M=16, up=(32, 256, 4, 3), down=(32, 256, 4, 3)),
    dict(BLOCK_M=16, up=(16, 256, 4, 4), down=(32, 128, 4, 5)),
    dict(BLOCK_M=16, up=(64, 128, 4, 3), down=(128, 128, 4, 3)),
    dict(BLOCK_M=16, up=(64, 64, 4, 5), down=(64, 64, 4, 5)),
    dict(BLOCK_M=32, up=(64, 128, 4, 3), down=(128, 64, 4, 3)),
    dict(BLOCK_M=64, up=(64, 64, 4, 3), down=(128, 64, 4, 3)),
]


# -------------------------------------------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/h200-qwen3-30b-a3b-moe.json")
    ap.add_argument("--ckpt", default="/tmp/modelgen-qwen3-30b-a3b")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--systems", nargs="+", default=["modelgen", "hf_eager", "profile", "hf_static"])
    ap.add_argument("--hf-static-batches", type=int, nargs="*", default=[1, 32])
    ap.add_argument("--budget-s", type=float, default=480, help="skip remaining phases past this")
    ap.add_argument("--env-legs", nargs="*", default=[],
                    help="more modelgen legs, each a fresh engine under one MODELGEN_NAME=VALUE (e.g. MODELGEN_GEMV=gemv, "
                         "MODELGEN_PIPELINED_DECODE=0), against the first leg in the same run")
    ap.add_argument("--pdl-levels", nargs="*", default=[],
                    help="after the modelgen leg (MODELGEN_PDL as set), rebuild the engine with each of these "
                         "MODELGEN_PDL levels (0/1), time it the same way and compare its greedy tokens")
    args = ap.parse_args()
    t_start = time.perf_counter()
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    left = lambda: args.budget_s - (time.perf_counter() - t_start)  # noqa: E731

    import transformers
    import triton

    cfg = dict(QWEN3_30B_A3B, num_hidden_layers=args.layers)
    res: dict = {
        "gpu": torch.cuda.get_device_name(0),
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
                     "transformers": transformers.__version__, "python": platform.python_version()},
        "model": {"shape": "Qwen3-30B-A3B", "layers": args.layers, "of_layers": 48, "dtype": "bfloat16",
                  "weights": "random, transformers' initialisation (std 0.02), written by save_pretrained"},
        "setup": {"prompt_tokens": args.prompt, "new_tokens": args.new, "batches": args.batches,
                  "decode_rate": "batch * (N - 1) / (T(N new tokens) - T(1 new token)), same for every system"},
    }

    def save() -> None:
        out_path.write_text(json.dumps(res, indent=2))

    log("ceilings")
    res.update(measure_ceilings())
    copy = res["hbm_copy_tb_s"] * 1e12
    ctx = args.prompt + args.new / 2
    res["bytes_per_step"] = {str(b): step_bytes(cfg, b, ctx) for b in args.batches}
    w1 = step_bytes(cfg, 1, 0)["weights"]
    res["active_weight_bytes_bs1"] = w1
    res["roofline_tok_s_bs1"] = copy / w1  # the definition: active weights only
    res["roofline_tok_s"] = {str(b): b * copy / res["bytes_per_step"][str(b)]["total"] for b in args.batches}
    log({k: res[k] for k in ("hbm_copy_tb_s", "bf16_matmul_peak_tflop_s", "active_weight_bytes_bs1",
                             "roofline_tok_s_bs1")})
    save()

    ckpt = Path(args.ckpt)
    log("transformers model + save_pretrained", ckpt)
    t0 = time.perf_counter()
    hf = build_and_save_hf(cfg, ckpt)
    res["checkpoint"] = {"bytes": sum(f.stat().st_size for f in ckpt.glob("*.safetensors")),
                         "write_s": time.perf_counter() - t0}
    try:
        res["hf_experts_implementation"] = hf.config._experts_implementation_internal
    except AttributeError:
        res["hf_experts_implementation"] = "unknown"
    warm_page_cache(ckpt)
    log(res["checkpoint"], "experts:", res["hf_experts_implementation"])

    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams

    llm = LLM(ckpt, target="rocm", dtype="bfloat16", device="cuda", max_model_len=args.prompt + args.new + 16,
              max_num_seqs=max(args.batches))
    res["modelgen_load_s"] = llm.load_seconds
    res["modelgen_backend"] = f"{llm.backend} ({llm.backend_reason})"
    log("modelgen loaded in", f"{llm.load_seconds:.1f}s;", res["modelgen_backend"])
    save()

    gen = torch.Generator().manual_seed(1)
    prompts = {b: torch.randint(1000, 100000, (b, args.prompt), generator=gen) for b in args.batches}
    greedy = lambda n: SamplingParams(max_new_tokens=n, ignore_eos=True)  # noqa: E731

    # Sanity: both implementations agree on the first greedy tokens (bf16, random weights: near-ties may flip late).
    ids = prompts[args.batches[0]][:1].cuda()
    want = hf_generate(hf, ids, 8, static=False)[0, ids.shape[1]:].tolist()
    got = llm.generate(ids.tolist(), greedy(8))[0]
    res["greedy_agreement_first_8"] = sum(a == b for a, b in zip(want, got))
    log("greedy agreement", res["greedy_agreement_first_8"], "/ 8", want, got)

    mg = res.setdefault("modelgen", {"decode_tok_s": {}})
    if "modelgen" in args.systems:
        log("modelgen: capture decode graphs")
        t0 = time.perf_counter()
        llm.warmup()
        mg["graph_capture_s"] = time.perf_counter() - t0
        for b in args.batches:
            mg["decode_tok_s"][str(b)], mg.setdefault("step_ms", {})[str(b)] = \
                modelgen_decode_rate(llm, prompts[b].tolist(), args.new, greedy)
            log(f"  modelgen bs{b}: {mg['decode_tok_s'][str(b)]:.1f} tok/s ({mg['step_ms'][str(b)]:.2f} ms/step; "
                f"roofline {res['roofline_tok_s'][str(b)]:.0f})")
            save()
        mg["pdl_level"] = settings.get("MODELGEN_PDL")
        legs = [(f"modelgen_pdl{level}", {"MODELGEN_PDL": str(level)}) for level in args.pdl_levels]
        for item in args.env_legs:
            name, _, value = item.partition("=")
            if not name.startswith("MODELGEN_") or not value:
                raise SystemExit(f"--env-legs {item!r}: expected MODELGEN_NAME=VALUE")
            legs.append((f"modelgen_{name[len('MODELGEN_'):].lower()}_{value}", {name: value}))
        if legs:
            llm = env_legs(args, ckpt, llm, prompts, greedy, res, legs)

    if "hf_eager" in args.systems:
        entry = res.setdefault("hf_eager", {"decode_tok_s": {}})
        for b in args.batches:
            if left() < 60:
                entry.setdefault("skipped", []).append(b)
                continue
            ids = prompts[b].cuda()
            hf_generate(hf, ids, 2, static=False)
            t1 = wall(lambda: hf_generate(hf, ids, 1, static=False))
            tn = wall(lambda: hf_generate(hf, ids, args.new, static=False))
            entry["decode_tok_s"][str(b)] = b * (args.new - 1) / (tn - t1)
            log(f"  hf eager bs{b}: {entry['decode_tok_s'][str(b)]:.1f} tok/s")
            save()

    if "profile" in args.systems and left() > 60:
        log("MoE block profile (graph replays over all layers)")
        from modelgen.runtime.layers.linear import linear
        from modelgen.runtime.layers.moe import kernels as gm

        res["moe_path_timings_ms"] = {str(k[:3]): v for k, v in gm.TIMINGS.items()}
        res["moe_profile"] = moe_profile(llm, args.batches, copy / 1e12, SWEEP)
        head = llm.model.lm_head.weight
        x1 = torch.randn(1, head.shape[1], device="cuda", dtype=head.dtype)
        lm_us = graph_ms(lambda: linear(x1, head)) * 1e3
        p1 = res["moe_profile"].get("1")
        step1 = mg.get("step_ms", {}).get("1")
        if p1 and step1:
            nl = args.layers
            rest = (step1 * 1e3 - lm_us - nl * p1["moe_block_us_per_layer"]) / nl
            res["bs1_step_breakdown_us"] = {
                "step": step1 * 1e3, "lm_head": lm_us, "lm_head_byte_time": step_bytes(cfg, 1, 0)["lm_head"] / copy * 1e6,
                "moe_block_per_layer": p1["moe_block_us_per_layer"],
                "rest_per_layer (attention, norms, embedding/sampling/host share)": rest,
                "attention_weight_byte_time_per_layer": step_bytes(cfg, 1, 0)["per_layer_attention"] / copy * 1e6,
            }
            log("bs1 step breakdown (us):", json.dumps(res["bs1_step_breakdown_us"]))
        save()

    if "hf_static" in args.systems:
        entry = res.setdefault("hf_static", {"decode_tok_s": {}})
        for b in args.hf_static_batches:
            if left() < 150:  # one compile takes a minute or more
                entry.setdefault("skipped", []).append(b)
                log(f"  hf static bs{b}: skipped (time budget)")
                continue
            ids = prompts[b].cuda()
            try:
                hf_generate(hf, ids, args.new, static=True)  # compile at the timed cache length
                hf_generate(hf, ids, 1, static=True)
                t1 = wall(lambda: hf_generate(hf, ids, 1, static=True))
                tn = wall(lambda: hf_generate(hf, ids, args.new, static=True))
            except Exception as e:
                entry.setdefault("errors", {})[str(b)] = f"{type(e).__name__}: {e}"[:400]
                log(f"  hf static bs{b}: FAILED {type(e).__name__}: {str(e)[:200]}")
                continue
            entry["decode_tok_s"][str(b)] = b * (args.new - 1) / (tn - t1)
            log(f"  hf static bs{b}: {entry['decode_tok_s'][str(b)]:.1f} tok/s")
            save()

    # ------------------------------------------------------------------------------------------------- summary
    goals, ratios = {}, {}
    for b in args.batches:
        m = mg["decode_tok_s"].get(str(b))
        if not m:
            continue
        r = {"of_roofline": m / res["roofline_tok_s"][str(b)]}
        for system in ("hf_eager", "hf_static"):
            other = res.get(system, {}).get("decode_tok_s", {}).get(str(b))
            if other:
                r[f"vs_{system}"] = m / other
        ratios[str(b)] = r
    res["ratios"] = ratios
    if mg["decode_tok_s"].get("1"):
        goals["bs1_fraction_of_active_weight_roofline"] = mg["decode_tok_s"]["1"] / res["roofline_tok_s_bs1"]
        goals["bs1_goal_met (>=0.60)"] = goals["bs1_fraction_of_active_weight_roofline"] >= 0.60
    if ratios.get("32", {}).get("vs_hf_eager"):
        goals["bs32_vs_hf_eager"] = ratios["32"]["vs_hf_eager"]
        goals["bs32_goal_met (>=5)"] = goals["bs32_vs_hf_eager"] >= 5
    res["goals"] = goals
    res["bench_wall_s"] = time.perf_counter() - t_start
    save()
    del hf
    gc.collect()
    try:
        plot(res, out_path.with_suffix(".png"))
    except ImportError:
        pass
    print("\nbatch | modelgen | hf eager | hf static | roofline | of roofline | vs eager")
    for b in args.batches:
        g = lambda s: res.get(s, {}).get("decode_tok_s", {}).get(str(b))  # noqa: E731
        fmt = lambda v: f"{v:,.0f}" if v else "-"  # noqa: E731
        r = ratios.get(str(b), {})
        print(f"{b:5d} | {fmt(g('modelgen'))} | {fmt(g('hf_eager'))} | {fmt(g('hf_static'))} | "
              f"{res['roofline_tok_s'][str(b)]:,.0f} | {r.get('of_roofline', 0):.1%} | {r.get('vs_hf_eager', 0):.2f}x")
    log(json.dumps(goals, indent=1))
    return 0


def modelgen_decode_rate(llm, ids: list[list[int]], new: int, greedy) -> tuple[float, float]:
    """(decode tokens/s, ms per step) of one batch: batch * (N - 1) / (T(N) - T(1)), best of two of each."""
    llm.generate(ids, greedy(2))
    t1 = min(wall(lambda: llm.generate(ids, greedy(1))) for _ in range(2))
    tn = min(wall(lambda: llm.generate(ids, greedy(new))) for _ in range(2))
    return len(ids) * (new - 1) / (tn - t1), (tn - t1) / (new - 1) * 1e3


def env_legs(args, ckpt: Path, llm, prompts: dict, greedy, res: dict, legs: list[tuple[str, dict]]):
    """The modelgen leg again for each ``(key, environment)`` of ``legs`` (``--pdl-levels``: programmatic dependent
    launch, runtime/ops/gpu/pdl.py; ``--env-legs``: any MODELGEN_* switch, e.g. MODELGEN_GEMV=gemv or
    MODELGEN_PIPELINED_DECODE=0): a fresh engine (decode graphs capture the launch attributes and the per-shape
    kernel choices, so they are re-captured and re-chosen), the same timing formula, and the 16 greedy tokens of every
    batch against the first leg's. Graphs and engines of earlier legs are freed first so the legs run on the same
    memory; each leg's environment is undone before the next."""
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.ops.gpu import linear as gl, pdl

    def tokens(engine) -> dict:
        return {str(b): engine.generate(prompts[b].tolist(), greedy(16)) for b in args.batches}

    base = tokens(llm)
    for key, env in legs:
        llm.close()
        del llm
        gc.collect()
        torch.cuda.empty_cache()
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        pdl.refresh()
        gl._CHOICE.clear()
        try:
            llm = LLM(ckpt, target="rocm", dtype="bfloat16", device="cuda", max_model_len=args.prompt + args.new + 16,
                      max_num_seqs=max(args.batches))
            llm.warmup()
            entry = res.setdefault(key, {"environment": env, "decode_tok_s": {}, "step_ms": {}})
            for b in args.batches:
                entry["decode_tok_s"][str(b)], entry["step_ms"][str(b)] = \
                    modelgen_decode_rate(llm, prompts[b].tolist(), args.new, greedy)
                base_rate = res["modelgen"]["decode_tok_s"].get(str(b))
                log(f"  modelgen {env} bs{b}: {entry['decode_tok_s'][str(b)]:.1f} tok/s "
                    f"({entry['step_ms'][str(b)]:.3f} ms/step; x{entry['decode_tok_s'][str(b)] / base_rate:.3f} "
                    f"of the first leg)" if base_rate else "")
            got = tokens(llm)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            pdl.refresh()
            gl._CHOICE.clear()
        entry["greedy_16_equal_first_leg"] = {b: got[b] == base[b] for b in base}
        log(f"  {env} greedy 16 tokens equal to the first leg:", entry["greedy_16_equal_first_leg"])
        res["bs1_step_ms_by_leg"] = {"first": res["modelgen"].get("step_ms", {}).get("1"),
                                     **{k: v["step_ms"].get("1") for k, v in res.items()
                                        if k.startswith("modelgen_") and isinstance(v, dict) and "step_ms" in v}}
        Path(args.out).write_text(json.dumps(res, indent=2))
    return llm


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"modelgen": ("modelgen (rocm module, Triton fused MoE + CUDA graphs)", "o-"),
              "hf_static": ("transformers, static cache (compiled)", "s-"),
              "hf_eager": ("transformers, eager (grouped_mm experts)", "^-")}
    for key, (label, style) in styles.items():
        d = res.get(key, {}).get("decode_tok_s", {})
        if d:
            bs = sorted(int(b) for b in d)
            ax.plot(bs, [d[str(b)] for b in bs], style, label=label)
    roof = res.get("roofline_tok_s", {})
    if roof:
        bs = sorted(int(b) for b in roof)
        ax.plot(bs, [roof[str(b)] for b in bs], "k--", label="roofline (active weights + KV bytes / copy rate)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(f"batch size (prompt {res['setup']['prompt_tokens']}, {res['setup']['new_tokens']} new tokens)")
    ax.set_ylabel("decode tokens/s")
    ax.set_title(f"Qwen3-30B-A3B shape ({res['model']['layers']} of 48 layers), bf16, {res.get('gpu', '')}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
