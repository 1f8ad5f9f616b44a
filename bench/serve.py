"""Serving throughput: `modelgen serve` driven by N concurrent streaming `openai` clients, against the same prompts
through `LLM.generate` in one batch (what `modelgen run` does), measured in the same run.

For each client count N (default 1, 8, 32, 64) one untimed warm-up wave, then one timed wave, first through the engine
in this process, then through the server (a `modelgen serve` subprocess on a free loopback port), and the ratio is
printed at once. Reported per N:

* ``tokens_per_s``: aggregate generated tokens over the wall time of the wave (engine and server);
* server only, client side: time to first token (request sent -> first non-empty SSE chunk) p50 / p95 / max, and
  per-request tokens/s: ``decode`` = (max_tokens - 1) / (last chunk - first chunk) and ``end_to_end`` = max_tokens /
  (last chunk - request sent), p50 and min over the wave.

``ignore_eos`` (vLLM's extension, passed through ``extra_body``) makes every request generate exactly ``--max-tokens``
so both sides do equal work. ``--out`` JSON is rewritten after every wave, so a run cut short keeps what it measured;
``--budget-s`` is hard: a wave that does not fit the time left (estimated from the warm-up) is skipped and recorded,
and at the deadline a watchdog writes the JSON, kills the server and exits 124.

Models
------
``--checkpoint DIR``: a real checkpoint (default: SmolLM2-135M-Instruct, converted on first use).

``--shape llama3-8b`` (hidden 4096, 32 layers, 32 query / 8 KV heads, intermediate 14336, vocab 128256, bf16) or
``--shape tiny`` (the same family at 2 layers x hidden 64, float32, for a CPU smoke run): a checkpoint directory
holding only ``config.json``, ``generation_config.json`` and a tokenizer is written to a temporary folder, and the
engine and the server both load random weights from the config alone (``load_format="dummy"`` /
``modelgen serve --load-dummy``: each tensor drawn on the device from its name and a seed, so the two processes run
the very same model, and nothing 16 GB is written to disk or read back). Nothing is downloaded.

The tokenizer is built here with ``tokenizers`` instead of copying Llama 3's (not in this repository, and its license
is Meta's, not Apache-2.0) or SmolLM2's (vocab 49152: padding the embedding to 128256 rows would leave 62% of the ids
a random model samples without any text, so the server would stream nothing for most tokens and the client-side time
to first token and per-token stream would be measured on held-back text). It is a byte-level BPE whose vocabulary is
exactly the model's: the 256 byte tokens, then every pair and as many triples of printable ASCII as fit (merges
pair -> triple, common letters first so English prompts come out 2-3 characters a token, about Llama 3's token count
for these questions), then Llama 3's 256 special ids (``<|begin_of_text|>`` 128000, ``<|eot_id|>`` 128009, ...) and a
Llama-3-style chat template. Every sampled id therefore decodes to 1-3 visible characters (the rare exceptions: the
161 non-printable byte tokens and the 256 specials, 0.3% of the ids), and the detokenizer does the work it does for a
real vocabulary of that size.

    python bench/serve.py --shape llama3-8b --device cuda --clients 1 8 32 64 --max-tokens 128 --budget-s 280 \\
        --out bench/results/h200-llama8b-serve.json
    python bench/serve.py --shape tiny --clients 1 8 --max-tokens 16 --budget-s 60     # CPU smoke run
    python bench/serve.py [--checkpoint DIR] [--clients 1 8 32] [--max-tokens 32]      # SmolLM2 on CPU
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import gc
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUESTIONS = ["What is the capital of France?", "Name three primary colors.", "What is 12 times 12?",
             "Who wrote Hamlet?", "What does a CPU do?", "Give a synonym of happy.", "How many legs has a spider?",
             "What is the boiling point of water?"]

# Llama 3's special tokens at the top of its vocabulary (128000 + index); the rest are <|reserved_special_token_K|>.
LLAMA3_SPECIALS = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 6: "<|start_header_id|>", 7: "<|end_header_id|>",
                   9: "<|eot_id|>"}
# Llama 3 Instruct's template without the system-date preamble: bos, then a header + content + <|eot_id|> per turn.
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                 "{{ m['content'] }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def shape_config(shape: str) -> dict:
    from bench.decode import LLAMA3_8B  # the shape every H200 Llama figure of bench/ uses

    cfg = dict(LLAMA3_8B)
    if shape == "tiny":  # same family and vocabulary layout, CPU-sized
        cfg.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, vocab_size=2048, bos_token_id=2048 - 256,
                   eos_token_id=2048 - 255, torch_dtype="float32")
    return cfg


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the alphabet of ``tokenizers``' ByteLevel pre-tokenizer)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def build_tokenizer(vocab_size: int, n_special: int):
    """A byte-level BPE ``tokenizers.Tokenizer`` with exactly ``vocab_size`` ids, the last ``n_special`` of them
    Llama-3-style special tokens (see the module docstring)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    byte_char = _bytes_to_unicode()
    n_regular = vocab_size - n_special
    if n_regular < 256 + 1:
        raise ValueError(f"vocab_size {vocab_size} leaves no room for the 256 byte tokens and merges")
    # printable ASCII, common English letters first: the earliest merges are the likeliest pairs
    order = " etaoinshrdlucmfwypvbgkjqxz" + "ETAOINSHRDLUCMFWYPVBGKJQXZ" + "0123456789" + ".,?!'\"-:;()/"
    order += "".join(c for c in map(chr, range(0x20, 0x7F)) if c not in order)
    alpha = [byte_char[ord(c)] for c in order]
    vocab = {byte_char[b]: b for b in range(256)}
    merges: list[tuple[str, str]] = []

    def add(left: str, right: str) -> bool:
        if len(vocab) >= n_regular:
            return False
        vocab[left + right] = len(vocab)
        merges.append((left, right))
        return True

    # every pair, then triples (pair + character), each ordered by the rank of its rarest character
    pairs = [alpha[i] + alpha[j] for w in range(len(alpha)) for i in range(w + 1) for j in range(w + 1)
             if max(i, j) == w]
    for p in pairs:
        if not add(p[0], p[1]):
            break
    rank = {c: i for i, c in enumerate(alpha)}
    for w in range(len(alpha)):
        for p in pairs:
            i, j = rank[p[0]], rank[p[1]]
            if max(i, j) > w:
                break  # pairs are ordered by their max rank
            for k in (range(w + 1) if max(i, j) == w else (w,)):
                if not add(p, alpha[k]):
                    break
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    names = [LLAMA3_SPECIALS.get(i, f"<|reserved_special_token_{i}|>") for i in range(n_special)]
    tok.add_special_tokens([AddedToken(n, special=True, normalized=False) for n in names])
    assert tok.get_vocab_size() == vocab_size, (tok.get_vocab_size(), vocab_size)
    return tok


def write_shape_checkpoint(shape: str, directory: Path) -> Path:
    """config.json + generation_config.json + tokenizer files for ``shape`` (no weights: loaded as dummy)."""
    cfg = shape_config(shape)
    vocab = cfg["vocab_size"]
    n_special = 256 if vocab >= 128256 else vocab // 8
    cfg["bos_token_id"], eot = vocab - n_special, vocab - n_special + 9
    cfg["eos_token_id"] = vocab - n_special + 1
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(cfg, indent=2))
    (directory / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": cfg["bos_token_id"], "eos_token_id": [cfg["eos_token_id"], eot]}))  # Llama 3 Instruct's
    build_tokenizer(vocab, n_special).save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": LLAMA3_SPECIALS[0], "eos_token": LLAMA3_SPECIALS[9], "chat_template": CHAT_TEMPLATE}))
    return directory


def _pct(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by linear interpolation; None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (k - lo)


class Run:
    """Results, the deadline and the server process; the JSON is rewritten after every wave."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + args.budget_s
        self.server: subprocess.Popen | None = None
        self.tmp: Path | None = None  # the --shape checkpoint and the server log, removed at the end
        self.lock = threading.Lock()
        self.results: dict = {"args": vars(args), "python": platform.python_version(), "engine": {}, "server": {},
                              "ratio_server_over_engine": {}, "skipped": [], "cut_by_budget": False}

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def save(self) -> None:
        with self.lock:
            self.results["elapsed_s"] = time.perf_counter() - self.t0
            data = copy.deepcopy(self.results)
        if self.args.out:
            tmp = f"{self.args.out}.tmp"
            with open(tmp, "w") as f:
                json.dump(data, f, indent=2)
            os.replace(tmp, self.args.out)

    def skip(self, what: str, need: float) -> None:
        line = f"{what}: skipped, needs ~{need:.0f}s, {max(self.left(), 0):.0f}s of the budget left"
        print(line, flush=True)
        self.results["skipped"].append(line)

    def stop_server(self) -> None:
        if self.server is not None and self.server.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.server.pid, signal.SIGTERM)
            try:
                self.server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.server.pid, signal.SIGKILL)
                self.server.wait(timeout=10)

    def watchdog(self) -> None:
        """At the deadline: record, write, kill the server, exit 124 (the run may be mid-wave)."""
        self.results["cut_by_budget"] = True
        print(f"budget of {self.args.budget_s}s reached: stopping", flush=True)
        with contextlib.suppress(Exception):
            self.save()
        with contextlib.suppress(Exception):
            if self.server is not None:
                os.killpg(self.server.pid, signal.SIGKILL)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
        os._exit(124)


def engine_waves(run: Run, ckpt: str, load_format: str, prompts: dict[int, list[list[int]]]) -> None:
    """The engine alone: every prompt of a wave in one LLM.generate call (modelgen run's path)."""
    import torch

    from modelgen import LLM, SamplingParams

    a = run.args
    t = time.perf_counter()
    llm = LLM(ckpt, target=a.target, dtype=a.dtype, device=a.device, max_num_seqs=max(a.clients),
              max_model_len=a.max_model_len, load_format=load_format, progress=False)
    run.results["engine_load_s"] = time.perf_counter() - t
    run.results["torch"] = torch.__version__
    run.results["torch_threads"] = torch.get_num_threads()
    run.results["backend"] = llm.backend
    if llm.device.type == "cuda":
        run.results["gpu"] = torch.cuda.get_device_name(llm.device)
    params = SamplingParams(max_new_tokens=a.max_tokens, ignore_eos=True)
    run.engine_texts = {}
    spent = 0.0  # estimated seconds of the timed engine waves so far
    for n in a.clients:
        t = time.perf_counter()
        llm.generate(prompts[n], params)  # warm-up: CUDA graphs of this batch's buckets, allocator, caches
        warm = time.perf_counter() - t
        # leave the server its start (about the engine's load) and its two waves per client count (~2.6x the engine's)
        reserve = 1.5 * run.results["engine_load_s"] + 10 + 2.6 * (spent + 1.3 * warm)
        if 1.3 * warm + 5 + reserve > run.left():
            run.skip(f"engine {n}", 1.3 * warm + 5 + reserve)
            continue
        spent += 1.3 * warm
        _sync(llm.device)
        t = time.perf_counter()
        outs = llm.generate(prompts[n], params)
        _sync(llm.device)
        dt = time.perf_counter() - t
        generated = sum(map(len, outs))
        run.results["engine"][str(n)] = {"tokens_per_s": generated / dt, "seconds": dt, "generated_tokens": generated,
                                         "warmup_seconds": warm}
        run.engine_texts[n] = [llm.tokenizer.decode(o) for o in outs]
        print(f"engine  {n:3d} prompts: {generated / dt:9.1f} tokens/s ({dt:.2f}s)", flush=True)
        run.save()
    del llm
    gc.collect()
    if a.device.startswith("cuda"):
        torch.cuda.empty_cache()


def _sync(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def start_server(run: Run, ckpt: str, load_dummy: bool, log_path: Path) -> int:
    a = run.args
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "modelgen.cli", "serve", "--checkpoint", ckpt, "--port", str(port),
           "--max-num-seqs", str(max(a.clients)), "--model-name", "m", "--target", a.target, "--device", a.device,
           "--max-waiting", str(4 * max(a.clients))]
    for flag, value in (("--dtype", a.dtype), ("--max-model-len", a.max_model_len)):
        if value is not None:
            cmd += [flag, str(value)]
    if load_dummy:
        cmd.append("--load-dummy")
    log = open(log_path, "w")
    run.server = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)  # its own process group: the watchdog kills uvicorn and whatever it started
    t = time.perf_counter()
    while True:
        if run.server.poll() is not None:
            raise RuntimeError(f"modelgen serve exited {run.server.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            break
        except OSError:
            if run.left() < 5:
                raise TimeoutError("the server did not answer /health within the budget") from None
            time.sleep(0.2)
    run.results["server_start_s"] = time.perf_counter() - t
    print(f"server up on port {port} after {run.results['server_start_s']:.1f}s", flush=True)
    return port


async def _client_wave(port: int, n: int, max_tokens: int, timeout: float) -> list[dict]:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=timeout)

    async def one(i: int) -> dict:
        t0 = time.perf_counter()
        first = last = None
        text = []
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}], stream=True,
            max_tokens=max_tokens, temperature=0, extra_body={"ignore_eos": True})
        async for chunk in stream:
            piece = chunk.choices[0].delta.content if chunk.choices else None
            if piece:
                last = time.perf_counter()
                first = first or last
                text.append(piece)
        return {"sent": t0, "first": first, "last": last, "text": "".join(text)}

    try:
        return list(await asyncio.gather(*(one(i) for i in range(n))))
    finally:
        await client.close()


def server_waves(run: Run, port: int) -> None:
    a = run.args
    asyncio.run(_client_wave(port, 1, 4, max(run.left(), 1)))  # the HTTP path's first request
    for n in a.clients:
        eng = run.results["engine"].get(str(n))
        need = 2.6 * (eng["seconds"] + 1) if eng else 0
        if need > run.left():
            run.skip(f"server {n}", need)
            continue
        asyncio.run(_client_wave(port, n, a.max_tokens, max(run.left(), 1)))  # warm-up wave
        t = time.perf_counter()
        got = asyncio.run(_client_wave(port, n, a.max_tokens, max(run.left(), 1)))
        dt = time.perf_counter() - t
        ttft = [g["first"] - g["sent"] for g in got if g["first"] is not None]
        decode = [(a.max_tokens - 1) / (g["last"] - g["first"]) for g in got
                  if g["first"] is not None and g["last"] > g["first"]]
        e2e = [a.max_tokens / (g["last"] - g["sent"]) for g in got if g["last"] is not None]
        texts = run.engine_texts.get(n)
        r = {"tokens_per_s": n * a.max_tokens / dt, "seconds": dt, "requests_with_text": len(ttft),
             "ttft_p50_s": _pct(ttft, 0.5), "ttft_p95_s": _pct(ttft, 0.95), "ttft_max_s": max(ttft, default=None),
             "per_request_decode_tokens_per_s_p50": _pct(decode, 0.5),
             "per_request_decode_tokens_per_s_min": min(decode, default=None),
             "per_request_end_to_end_tokens_per_s_p50": _pct(e2e, 0.5),
             "per_request_end_to_end_tokens_per_s_min": min(e2e, default=None),
             # informational: greedy text equal to the engine's for the same prompt (batch composition and bf16
             # rounding may flip near-ties of a random model; SmolLM2 in fp32 should match everywhere)
             "texts_equal_engine": None if texts is None else sum(g["text"] == t for g, t in zip(got, texts))}
        run.results["server"][str(n)] = r
        line = (f"server  {n:3d} clients: {r['tokens_per_s']:9.1f} tokens/s ({dt:.2f}s), TTFT p50 "
                f"{r['ttft_p50_s']:.3f}s p95 {r['ttft_p95_s']:.3f}s, per request {r['per_request_decode_tokens_per_s_p50']:.1f} "
                f"tokens/s decode p50 (min {r['per_request_decode_tokens_per_s_min']:.1f})")
        if eng:
            ratio = r["tokens_per_s"] / eng["tokens_per_s"]
            run.results["ratio_server_over_engine"][str(n)] = ratio
            line += f"; {ratio:.2f}x LLM.generate"
        print(line, flush=True)
        run.save()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", default=None, help="checkpoint directory (default: SmolLM2-135M-Instruct)")
    src.add_argument("--shape", choices=["llama3-8b", "tiny"], default=None,
                     help="random weights of this shape (config + local tokenizer, no checkpoint)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--target", default="rocm")
    ap.add_argument("--dtype", default=None, help="default: the config's torch_dtype")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--max-model-len", type=int, default=None,
                    help="KV-cache context per request (default with --shape: 512, enough for these prompts)")
    ap.add_argument("--budget-s", type=float, default=600.0, help="hard wall-clock limit of the whole run")
    ap.add_argument("--out", default=None, help="JSON results (rewritten after every wave)")
    ap.add_argument("--workdir", default=None, help="where --shape writes its config and tokenizer (default: a "
                    "temporary folder, removed at the end)")
    args = ap.parse_args()
    if args.shape and args.max_model_len is None:
        args.max_model_len = 512
    run = Run(args)
    timer = threading.Timer(max(args.budget_s, 0.0), run.watchdog)
    timer.daemon = True
    timer.start()

    tmp = run.tmp = Path(tempfile.mkdtemp(prefix="modelgen-serve-bench-"))
    try:
        if args.shape:
            ckpt = str(write_shape_checkpoint(args.shape, Path(args.workdir) if args.workdir else tmp / args.shape))
            load_format = "dummy"
        else:
            from modelgen.runtime.convert.smollm2 import ensure_smollm2_checkpoint

            ckpt = args.checkpoint or str(ensure_smollm2_checkpoint())
            load_format = "auto"
        run.results["checkpoint"] = ckpt
        # `modelgen serve` refuses a generated package its spec/templates no longer produce: say so now, not after
        # the engine waves
        from modelgen.codegen.freshness import stale_reason
        from modelgen.runtime.checkpoint_dir import CheckpointDir
        from modelgen.runtime.engine.registry import find_model

        cd = CheckpointDir(ckpt)
        stale = stale_reason(find_model(cd.architectures, args.target, cd.hf_config))
        if stale:
            raise SystemExit(f"bench/serve.py: {stale}")
        run.results["weights"] = "random (load_format=dummy)" if load_format == "dummy" else "checkpoint"
        from modelgen.runtime.tokenizer import Tokenizer

        tokenizer = Tokenizer.from_checkpoint(ckpt)
        prompts = {n: [tokenizer.encode_chat(QUESTIONS[i % len(QUESTIONS)]) for i in range(n)] for n in args.clients}
        run.results["prompt_tokens"] = [len(p) for p in prompts[max(args.clients)][:len(QUESTIONS)]]
        print(f"{ckpt}: prompts of {run.results['prompt_tokens']} tokens, {args.max_tokens} new tokens each, "
              f"clients {args.clients}, budget {args.budget_s:.0f}s", flush=True)
        engine_waves(run, ckpt, load_format, prompts)
        port = start_server(run, ckpt, load_format == "dummy", tmp / "server.log")
        server_waves(run, port)
    except BaseException as e:
        run.results["error"] = f"{type(e).__name__}: {str(e)[:2000]}"
        raise
    finally:
        timer.cancel()
        run.save()
        run.stop_server()
        if run.server is not None and run.server.returncode not in (0, -signal.SIGTERM):
            print(f"server log tail:\n{(tmp / 'server.log').read_text()[-2000:]}", flush=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
