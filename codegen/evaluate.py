"""Build-time evaluation of every expression of a spec against a sample config, so type errors fail the build.

Lowering proves each expression *parses* and names only declared fields; it never runs them, so ``default: min`` or
``head_dim: hidden_size // "x"`` used to build green and fail in the generated ``from_hf_config``. Here every config
default (in dependency order), every derived value, every ``requires`` check, the layer count and block rule, and
every other expression-valued field (norm eps, head counts, RoPE theta, router sizes, ...) is evaluated with
:mod:`modelgen.codegen.expr`'s bounded interpreter over a *sample config*: each field at its default, or, when it has
none, at a sample value of its declared type (ints 8, 16, 32, ... distinct so that differences are not zero).

What is reported (each a located :class:`SpecIssue` at the expression's value):
  * type errors (``int // str``, ``len(5)``), always;
  * a default whose value does not have the field's declared type (``type: int`` with ``default: 1.5``);
  * value errors (division by zero, index out of range, a missing key) and bound violations (``2 ** x`` wider than
    the limit) only when the expression does not depend on a sampled value: with the real config they may not
    happen, and a false alarm would block a correct spec;
  * a block rule that yields something other than a block name, for the sample's layers.

Entry points: :func:`evaluate_spec` (a loaded spec and its source map -> issues) and :func:`check_spec_file`.
"""
from __future__ import annotations

import itertools
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .errors import SpecError, SpecIssue
from .expr import Expr, ExprError, parse_expr, shared_budget, short_repr
from .source_map import Path_, SourceMap
from .spec_file import load_spec

MAX_SAMPLE_LAYERS = 64  # the block rule is evaluated for this many layers of the sample at most

_SAMPLES: dict[str, Any] = {"float": 1.0e-6, "bool": False, "str": "sample", "rope_scaling": {}, "int_list": [],
                            "str_list": [], "float_list": []}
_SKIP_SECTIONS = ("config", "derived", "requires", "layers")  # evaluated with their own rules below


def _type_ok(value: Any, type_: str, nullable: bool) -> bool:
    if value is None:
        return nullable or type_ == "rope_scaling"
    if type_ == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_ == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if type_ == "bool":
        return isinstance(value, bool)
    if type_ == "str":
        return isinstance(value, str)
    if type_ == "rope_scaling":
        return isinstance(value, dict)
    if type_ in ("int_list", "str_list"):
        item = str if type_ == "str_list" else int
        return isinstance(value, (list, tuple)) and all(
            isinstance(v, item) and not isinstance(v, bool) for v in value)
    if type_ == "float_list":
        return isinstance(value, (list, tuple)) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    return True  # a type this module does not know yet: schema validation owns the list


def _is_expression(annotation: Any) -> bool:
    """Whether a schema field holds an expression (``Union[str, int, float, bool]``, maybe optional/annotated)."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    args = set(typing.get_args(annotation))
    return {str, int, float, bool} <= args


class _Evaluator:
    def __init__(self, spec: Any, smap: SourceMap):
        self.spec = spec
        self.smap = smap
        self.issues: list[SpecIssue] = []
        self.env: dict[str, Any] = {}
        self.sampled: set[str] = set()  # names whose value is a sample, not known at build time

    def report(self, path: Path_, message: str) -> None:
        self.issues.append(self.smap.issue(path, message))

    def parse(self, value: Any) -> Expr | None:
        try:
            return parse_expr(value)
        except ExprError:
            return None  # lowering reports parse errors, located; nothing to evaluate

    def run(self, path: Path_, value: Any, extra: dict[str, Any] | None = None) -> tuple[bool, Any]:
        """Evaluate; (True, value) on success, (False, None) when it failed or cannot be evaluated."""
        expr = self.parse(value)
        if expr is None:
            return False, None
        env = {**self.env, **(extra or {})}
        if not expr.names <= set(env):
            return False, None  # an undefined name or a value that failed earlier: reported elsewhere
        try:
            return True, expr.evaluate(env)
        except ExprError as e:
            if e.cause is not TypeError and expr.names & self.sampled:
                return False, None  # e.g. a division by a sampled size: may be fine with the real config
            self.report(path, str(e))
            return False, None

    # -- config and derived values, in dependency order
    def values(self) -> None:
        fields = dict(self.spec.config)
        derived = dict(getattr(self.spec, "derived", {}) or {})
        deps: dict[str, set[str]] = {}
        for name, f in fields.items():
            expr = self.parse(f.default) if f.default is not None else None
            deps[name] = set(expr.names) if expr else set()
        for name, value in derived.items():
            expr = self.parse(value)
            deps[name] = set(expr.names) if expr else set()
        samples = (2 ** (3 + k % 10) for k in itertools.count())  # 8, 16, ..., 4096, 8, ...
        pending = list(fields) + [n for n in derived if n not in fields]
        while pending:
            ready = [n for n in pending if not deps[n] & set(pending)]
            if not ready:
                return  # a cycle: lowering reports it
            for name in ready:
                pending.remove(name)
                if name in fields:
                    self.config_value(name, fields[name], samples)
                    continue
                ok, value = self.run(("derived", name), derived[name])
                if ok:
                    self.env[name] = value
                    if deps[name] & self.sampled:
                        self.sampled.add(name)

    def config_value(self, name: str, f: Any, samples: typing.Iterator[int]) -> None:
        if f.default is None:
            self.env[name] = next(samples) if f.type == "int" else _SAMPLES.get(f.type)
            self.sampled.add(name)
            return
        path = ("config", name, "default")
        ok, value = self.run(path, f.default)
        if not ok:
            return
        if not _type_ok(value, f.type, f.nullable):
            shown = getattr(value, "__name__", None) or short_repr(value)
            self.report(path, f"default {short_repr(f.default)} evaluates to {shown} ({type(value).__name__}), "
                              f"but the field is declared `type: {f.type}`")
            return
        self.env[name] = value
        expr = self.parse(f.default)
        if expr is not None and expr.names & self.sampled:
            self.sampled.add(name)

    # -- everything else
    def requires(self) -> None:
        for n, req in enumerate(getattr(self.spec, "requires", ()) or ()):
            self.run(("requires", n, "check"), req.check)

    def layers(self) -> None:
        layers = self.spec.layers
        ok, count = self.run(("layers", "count"), layers.count)
        if not ok:
            return
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            self.report(("layers", "count"), f"layer count {short_repr(layers.count)} evaluates to "
                                             f"{short_repr(count)}, "
                                             "not a non-negative integer")
            return
        rule = getattr(layers, "block_rule", None)
        if rule is None:
            return
        expr = self.parse(rule)
        sampled = expr is not None and bool(expr.names & self.sampled)
        for i in range(min(count, MAX_SAMPLE_LAYERS)):
            ok, block = self.run(("layers", "block_rule"), rule, {"i": i})
            if not ok:
                return
            if (not isinstance(block, str) or block not in self.spec.blocks) and not sampled:
                self.report(("layers", "block_rule"), f"rule yields {short_repr(block)} for layer i={i}; blocks: "
                                                      f"{', '.join(map(str, self.spec.blocks))}")
                return

    def fields(self, node: Any, path: Path_) -> None:
        """Every expression-valued field of the schema models below ``node``."""
        if isinstance(node, BaseModel):
            for name, info in type(node).model_fields.items():
                if not path and name in _SKIP_SECTIONS:
                    continue
                value = getattr(node, name)
                if _is_expression(info.annotation) and isinstance(value, (str, int, float)):
                    self.run(path + (name,), value)
                else:
                    self.fields(value, path + (name,))
        elif isinstance(node, dict):
            for key, value in node.items():
                self.fields(value, path + (key,))
        elif isinstance(node, (list, tuple)):
            for i, value in enumerate(node):
                self.fields(value, path + (i,))


def evaluate_spec(spec: Any, smap: SourceMap) -> list[SpecIssue]:
    """Evaluate every expression of a schema-valid spec against its sample config; the problems found, located."""
    ev = _Evaluator(spec, smap)
    ev.values()
    ev.requires()
    ev.layers()
    ev.fields(spec, ())
    return ev.issues


def check_spec_file(path: str | Path) -> None:
    """Load + validate ``path`` and evaluate it; raises :class:`SpecError` on any issue."""
    spec, smap, _ = load_spec(Path(path))
    with shared_budget():
        issues = evaluate_spec(spec, smap)
    if issues:
        raise SpecError(issues)
