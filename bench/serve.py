"""Serving throughput on CPU: `modelgen serve` (SmolLM2-135M-Instruct by default) driven by 1, 8 and 32 concurrent
streaming `openai` clients, against the same prompts through `LLM.generate` in one batch (what `modelgen run` does).

Reports aggregate generated tokens/s (all clients' tokens over the wall time of the wave) and time to first token
(client side: request sent -> first non-empty SSE chunk). ``ignore_eos`` (vLLM's extension) makes every request
generate exactly ``--max-tokens`` so the runs compare equal work.

    python bench/serve.py [--checkpoint DIR] [--clients 1 8 32] [--max-tokens 32] [--out bench/results/x.json]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

QUESTIONS = ["What is the capital of France?", "Name three primary colors.", "What is 12 times 12?",
             "Who wrote Hamlet?", "What does a CPU do?", "Give a synonym of happy.", "How many legs has a spider?",
             "What is the boiling point of water?"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from openai import OpenAI

    from modelgen import LLM, SamplingParams
    from modelgen.runtime.convert.smollm2 import ensure_smollm2_checkpoint

    ckpt = args.checkpoint or str(ensure_smollm2_checkpoint())
    top = max(args.clients)
    results: dict = {"checkpoint": ckpt, "max_tokens": args.max_tokens, "torch_threads": None, "engine": {},
                     "server": {}}

    # The engine alone (modelgen run's path): every prompt of a wave in one generate() call.
    llm = LLM(ckpt, max_num_seqs=top, progress=False)
    import torch

    results["torch_threads"] = torch.get_num_threads()
    params = SamplingParams(max_new_tokens=args.max_tokens, ignore_eos=True)
    for n in args.clients:
        prompts = [llm.tokenizer.encode_chat(QUESTIONS[i % len(QUESTIONS)]) for i in range(n)]
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params)
        dt = time.perf_counter() - t0
        results["engine"][n] = {"tokens_per_s": sum(map(len, outs)) / dt, "seconds": dt}
        print(f"engine  {n:3d} prompts: {results['engine'][n]['tokens_per_s']:.1f} tokens/s", flush=True)
    del llm

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "modelgen.codegen.cli", "serve", "--checkpoint", ckpt,
                               "--port", str(port), "--max-num-seqs", str(top), "--model-name", "m"],
                              env={**os.environ}, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)

        def one(i: int):
            t0 = time.perf_counter()
            first = None
            text = ""
            stream = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}], stream=True,
                max_tokens=args.max_tokens, temperature=0, extra_body={"ignore_eos": True},
                stream_options={"include_usage": False})
            for chunk in stream:
                piece = chunk.choices[0].delta.content if chunk.choices else None
                if piece and first is None:
                    first = time.perf_counter() - t0
                text += piece or ""
            return first, text

        one(0)  # warm the HTTP path
        for n in args.clients:
            t0 = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(n) as pool:
                got = list(pool.map(one, range(n)))
            dt = time.perf_counter() - t0
            ttft = [g[0] for g in got if g[0] is not None]
            results["server"][n] = {"tokens_per_s": n * args.max_tokens / dt, "seconds": dt,
                                    "ttft_median_s": statistics.median(ttft), "ttft_max_s": max(ttft)}
            r = results["server"][n]
            print(f"server  {n:3d} clients: {r['tokens_per_s']:.1f} tokens/s, TTFT median {r['ttft_median_s']:.3f}s "
                  f"max {r['ttft_max_s']:.3f}s", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
