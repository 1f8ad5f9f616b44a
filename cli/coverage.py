"""``modelgen coverage SPEC CHECKPOINT [--tp N]``: does a checkpoint fit a spec's generated model, without reading
a single weight?

The safetensors headers give every tensor's name, shape and dtype (``runtime/loader/checkpoint.py`` parses them
without touching data). The model is built on the ``meta`` device (shapes and dtypes, no storage) for each
tensor-parallel rank, and the target's real loader runs over a :class:`HeaderCheckpoint`, whose tensors are meta
tensors of the recorded shapes: the same routing (renames, ignore rules, fusions with shard ids, expert tables,
tied parameters), the same ``weight_loader`` shape checks and the same strict coverage report as a real load --
nothing re-implemented, and seconds even for an index of hundreds of GB. ``modelgen run`` runs it first and fails
before loading anything.

Errors are the loader's (file, tensor, shape, dtype, parameter, expected shape), followed by where to fix them in the
spec when that can be told: an unexpected tensor -> ``checkpoint.ignore`` / ``checkpoint.rename``; a parameter with
no tensor -> the block module that creates it (``blocks.<block>.<slot>``) or ``checkpoint:``.
"""
from __future__ import annotations

import logging
import re
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import torch

from modelgen.runtime.checkpoint_dir import CheckpointDir
from modelgen.runtime.hf_config import ConfigError, check_core_fields
from modelgen.runtime.loader.checkpoint import Checkpoint, CheckpointError

from modelgen.codegen.errors import ModelgenError
from modelgen.codegen.expr import short_repr


class CoverageError(CheckpointError):
    """The checkpoint does not fit the model; ``str()`` is the whole report."""


class CoverageConfigError(ConfigError, ModelgenError):
    """The checkpoint's config.json is refused before any model is built: one line naming the file and field (a
    ModelgenError, so ``modelgen coverage`` prints it as such, not as a traceback)."""


class _MetaSlice:
    """A safetensors slice stand-in: indexing returns meta tensors of the indexed shape."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, st_dtype: str):
        self._shape, self._dtype, self._st = shape, dtype, st_dtype

    def get_shape(self) -> list[int]:
        return list(self._shape)

    def get_dtype(self) -> str:
        return self._st

    def __getitem__(self, index: Any) -> torch.Tensor:
        return torch.empty(self._shape, dtype=self._dtype, device="meta")[index]


class HeaderCheckpoint:
    """A :class:`Checkpoint` seen through its headers: ``get_tensor``/``get_slice`` return meta tensors of the
    recorded shape and dtype (no data is read) and count how often each tensor is taken."""

    raw_reads = False  # never the GPU raw-byte reader

    def __init__(self, checkpoint: Checkpoint):
        self._c = checkpoint
        self.reads: Counter[str] = Counter()
        self.files = checkpoint.files
        self.path = checkpoint.path

    def keys(self) -> list[str]:
        return self._c.keys()

    def __iter__(self):
        return iter(self._c.keys())

    def __len__(self) -> int:
        return len(self._c)

    def __contains__(self, name: object) -> bool:
        return name in self._c

    def file_of(self, name: str) -> Path:
        return self._c.file_of(name)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._c.shape(name)

    def dtype(self, name: str) -> torch.dtype:
        return self._c.dtype(name)

    def metadata(self, file: Any = None) -> dict[str, str]:
        return self._c.metadata(file)

    def get_tensor(self, name: str) -> torch.Tensor:
        self.reads[name] += 1
        return torch.empty(self.shape(name), dtype=self.dtype(name), device="meta")

    def get_slice(self, name: str) -> _MetaSlice:
        self.reads[name] += 1
        return _MetaSlice(self.shape(name), self.dtype(name), self._c.header_dtype(name))

    def close(self) -> None:
        self._c.close()

    def __enter__(self) -> "HeaderCheckpoint":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextmanager
def parallel_rank(rank: int, world: int, expert_parallel_size: int | None = None) -> Iterator[None]:
    """Build layers as rank ``rank`` of ``world`` would (``runtime/distributed.py``'s tp_rank/tp_size and, for MoE
    layers, its ParallelConfig), with no process group: only shapes are needed."""
    from modelgen.runtime import distributed

    saved = distributed.tp_rank, distributed.tp_size, distributed.parallel_config()
    distributed.tp_rank, distributed.tp_size = (lambda: rank), (lambda: world)
    distributed.set_parallel_config(distributed.ParallelConfig(expert_parallel_size=expert_parallel_size))
    try:
        yield
    finally:
        distributed.tp_rank, distributed.tp_size = saved[:2]
        distributed.set_parallel_config(saved[2])


def _engine_defaults() -> dict[str, Any]:
    """``LLM(...)``'s default arguments: what a target's ``build_model`` reads (neuron builds its NeuronConfig from
    them), as a plain ``LLM(checkpoint)`` would pass them."""
    import inspect

    from modelgen.runtime.engine.llm import LLM

    return {name: p.default for name, p in inspect.signature(LLM.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


@dataclass
class RankCoverage:
    rank: int
    parameters: list[tuple[str, tuple[int, ...], str]] = field(default_factory=list)  # name, shape, dtype
    error: str | None = None


@dataclass
class CoverageReport:
    spec: str
    checkpoint: str
    target: str
    tp: int
    ep: int | None = None
    tensors: int = 0
    files: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (count, why) the loader skipped on purpose
    read_counts: Counter = field(default_factory=Counter)
    ranks: list[RankCoverage] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)  # spec locations of the fixes

    @property
    def passed(self) -> bool:
        return bool(self.ranks) and all(r.error is None for r in self.ranks)

    def format(self, parameters: bool = True) -> str:
        ep = f", ep={self.ep}" if self.ep is not None else ""
        lines = [f"coverage of {self.checkpoint} by {self.spec} ({self.target} target, tp={self.tp}{ep}): "
                 f"{self.tensors} tensors in {self.files} file(s), headers only"]
        consumed = sum(1 for n in self.read_counts.values() if n)
        twice = sorted(k for k, n in self.read_counts.items() if n > 1)
        lines.append(f"  rank 0 consumed {consumed} tensor(s), skipped {sum(n for n, _ in self.skipped)} on purpose"
                     + (f"; read more than once: {', '.join(twice)}" if twice else ""))
        for n, why in self.skipped:
            lines.append(f"    skipped {n}: {why}")
        for r in self.ranks:
            if r.error is not None:
                lines.append(f"  rank {r.rank}: ERROR")
                lines += [f"    {line}" for line in r.error.splitlines()]
                continue
            lines.append(f"  rank {r.rank}: {len(r.parameters)} parameters, "
                         f"{sum(_numel(s) for _, s, _ in r.parameters):,} elements")
            if parameters:
                lines += [f"    {n}  {list(s)}  {d}" for n, s, d in r.parameters]
        lines += [f"  {h}" for h in self.hints]
        lines.append(f"coverage: {'ok' if self.passed else 'FAILED'}")
        return "\n".join(lines)


    def one_line(self) -> str:
        """The failure as one line (what ``run`` prints; ``--verbose`` prints :meth:`format`): the first failing
        rank's mismatch, each group of names with its count and first name, and where in the spec to fix it."""
        failing = [r for r in self.ranks if r.error is not None]
        if not failing:
            return f"coverage of {self.checkpoint} by {self.spec}: ok"
        lines = [line.strip() for line in failing[0].error.splitlines() if line.strip()]
        groups: list[list] = []  # [label, count, first name]
        for line in lines[1:]:
            m = re.fullmatch(r"(.*) \((\d+)\):", line)
            if m:
                groups.append([m.group(1), int(m.group(2)), None])
            elif groups and groups[-1][2] is None:
                groups[-1][2] = line
        detail = "; ".join(f"{label}: {n}" + (f", first {first}" if first else "") for label, n, first in groups)
        text = lines[0].rstrip(":") + (f": {detail}" if detail else "".join(f"; {line}" for line in lines[1:2]))
        ranks = [r.rank for r in failing]
        where = [h.split(": ", 1)[0] for h in self.hints[:1]]
        return (f"coverage of {self.checkpoint} by {self.spec} failed on rank {ranks[0]}"
                + (f" (and ranks {', '.join(map(str, ranks[1:]))})" if len(ranks) > 1 else "") + f": {text}"
                + (f"; fix at {where[0]}" if where else "") + "; --verbose for the full report")


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def checkpoint_coverage(module: ModuleType, checkpoint: str | Path | CheckpointDir, target: str = "rocm",
                        tp: int = 1, dtype: torch.dtype | None = None, spec_path: str | Path | None = None,
                        allow_external_shards: bool = False, ep: int | None = None) -> CoverageReport:
    """Dry-run ``module``'s loader on ``checkpoint``'s headers for every rank of ``tp``; never raises for a
    mismatch (the report holds it, with ``spec_path``'s locations of the fixes when given)."""
    import logging

    from modelgen.runtime.engine.model_build import DTYPES, check_rope_table, default_dtype
    from modelgen.runtime.loader.quantization import wrap_checkpoint
    from modelgen.runtime.targets import get_target

    ckdir = checkpoint if isinstance(checkpoint, CheckpointDir) else CheckpointDir(checkpoint)
    # The engine's config checks first, in its order: a bad config is its one-line ConfigError, not a coverage report.
    try:
        check_core_fields(ckdir.hf_config, str(ckdir.config_path))
        try:
            config = module.CONFIG_CLASS.from_hf_config(ckdir.hf_config)
        except ConfigError as e:
            raise ConfigError(f"{ckdir.config_path}: {e}") from None
        check_core_fields(config, str(ckdir.config_path))
        # The RoPE table is built with the model, on the CPU even under the meta device: refuse an absurd one first.
        check_rope_table(config, ckdir.config_path, torch.device("cpu"))
    except ConfigError as e:
        raise CoverageConfigError(str(e)) from None
    if dtype is None:
        name = ckdir.hf_config.get("torch_dtype") or ckdir.hf_config.get("dtype") or "float32"
        # Other bad names (7, "float8") fall back to float32 here and the engine refuses them by field when it runs;
        # a dict or list cannot even be looked up (unhashable): refused now, in one line.
        if isinstance(name, (dict, list)):
            raise CoverageConfigError(f"{ckdir.config_path}: torch_dtype: expected a dtype name such as "
                                      f"\"bfloat16\", got {short_repr(name)}")
        dtype = DTYPES.get(name, torch.float32)
    target_obj = get_target(target)
    raw = Checkpoint(ckdir.path, allow_external_shards=allow_external_shards, check_finite="off")
    report = CoverageReport(str(spec_path or getattr(module, "SPEC", "?")), str(ckdir.path), target, tp, ep,
                            tensors=len(raw), files=len(raw.files))
    engine_args = _engine_defaults()
    collector = _SkipLog()
    logger = logging.getLogger("modelgen.loader")
    old_level = logger.level
    logger.addHandler(collector)
    logger.setLevel(logging.INFO)
    try:
        for rank in range(tp):
            header = HeaderCheckpoint(raw)
            rc = RankCoverage(rank)
            with parallel_rank(rank, tp, ep), default_dtype(dtype), torch.device("meta"):
                try:
                    build = getattr(target_obj, "build_model", None)  # neuron: through the generated factory
                    model = (build(module, config, ckdir.hf_config, engine_args) if build is not None
                             else module.MODEL_CLASS(config))
                    rc.parameters = [(n, tuple(p.shape), str(p.dtype).removeprefix("torch."))
                                     for n, p in model.named_parameters()]
                    target_obj.load(model, wrap_checkpoint(header, ckdir.quantization, dtype))
                except (CheckpointError, ValueError) as e:
                    rc.error = str(e)
                except (TypeError, OverflowError, RuntimeError, MemoryError) as e:
                    # torch refusing a size the config checks let through (hidden_size: 1e300 overflows a C long):
                    # reported as this rank's error, its first line only (torch appends a C++ stack).
                    first = (str(e).splitlines() or [""])[0]
                    rc.error = f"cannot build the model for this config: {type(e).__name__}: {short_repr(first)}"
            if rank == 0:
                report.read_counts = Counter({k: header.reads.get(k, 0) for k in raw.keys()})
                collector.active = False
            report.ranks.append(rc)
    finally:
        logger.removeHandler(collector)
        logger.setLevel(old_level)
        raw.close()
    report.skipped = collector.lines
    errors = "\n".join(r.error for r in report.ranks if r.error)
    if errors and spec_path is not None:
        report.hints = spec_hints(spec_path, errors)
    return report


class _SkipLog(logging.Handler):
    """The loader's "skipped N checkpoint tensor(s): <why>" INFO lines (runtime/loader/report.py), while ``active``."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.active = True
        self.lines: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        m = re.match(r".*: skipped (\d+) checkpoint tensor\(s\): (.*)$", record.getMessage())
        if m and self.active:
            self.lines.append((int(m.group(1)), m.group(2)))


# ------------------------------------------------------------------------------------------ spec locations of fixes
def spec_hints(spec_path: str | Path, error: str) -> list[str]:
    """``file:line:col: field: ...`` lines pointing at where the spec decides about the tensors an error names."""
    from modelgen.codegen.spec_file import load_spec

    try:
        spec, smap, _ = load_spec(spec_path)
    except Exception:  # a spec that does not load has its own errors (modelgen check)
        return []
    hints: list[str] = []
    unexpected = "used by no parameter" in error
    missing = "with no checkpoint tensor" in error
    if unexpected:
        where = ("checkpoint", "ignore") if spec.checkpoint.ignore else ("checkpoint",)
        hints.append(str(smap.issue(where, "tensors the model does not use: ignore them here on purpose, or rename "
                                           "them (checkpoint.rename) to the names the model expects")))
    if missing:
        modules = {}
        for key, block in spec.blocks.items():
            for slot in ("attention", "mlp"):
                modules.setdefault(getattr(block, slot).name, ("blocks", key, slot))
        named = sorted({m for m in re.findall(r"\.(\w+)\.", error) if m in modules})
        for m in named:
            hints.append(str(smap.issue(modules[m], f"creates '{m}' parameters the checkpoint has no tensor for")))
        if not named:
            hints.append(str(smap.issue(("checkpoint",), "parameters without a checkpoint tensor: check fuse / "
                                                         "rename / prefix against the checkpoint's names")))
    shape = re.search(r"-> parameter '([^']+)'", error)
    if shape and not (unexpected or missing):
        hints.append(str(smap.issue(("config",), f"parameter '{shape.group(1)}' is sized from these fields: check "
                                                 f"them against config.json")))
    return hints
