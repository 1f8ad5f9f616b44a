"""Property-based fuzzing of the spec compiler: mutated committed specs and random expressions.

The property: whatever the input, the compiler either succeeds or raises one of its own errors
(:class:`~modelgen.codegen.errors.ModelgenError`: a :class:`SpecError` whose every line is ``file:line:col: ...``
pointing into one of the spec files, or a :class:`CodegenError`) -- never another exception, never a hang (each
example has a deadline), never a partial write (a failed build leaves its output directory empty).

Runs ``MODELGEN_FUZZ_EXAMPLES`` examples per property (default 500, derandomized so CI is deterministic; set it, e.g.
to 10000, for a nightly-style run with fresh random seeds). The full build (render + write) is slower, so it runs a
twentieth as many (one build renders a package through Jinja2 and libcst: ~0.5-1 s). CI cost measured on the 2-core
dev machine: ~45 s for the three properties. Needs ``hypothesis`` (the ``test`` extra).
"""
from __future__ import annotations

import copy
import math
import os
import re
import shutil
import tempfile
import warnings
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from ruamel.yaml import YAML  # noqa: E402
from ruamel.yaml.comments import CommentedMap, CommentedSeq  # noqa: E402

from modelgen.codegen.build import build  # noqa: E402
from modelgen.codegen.errors import CodegenError, ModelgenError, SpecError  # noqa: E402
from modelgen.codegen.evaluate import check_spec_file  # noqa: E402
from modelgen.codegen.expr import FUNCTIONS, ExprError, parse_expr  # noqa: E402
from modelgen.codegen.lower import compile_spec  # noqa: E402
from modelgen.codegen.render import TARGETS  # noqa: E402

SPECS = Path(__file__).resolve().parent.parent / "specs"
TEXTS = {p.name: p.read_text() for p in sorted(SPECS.glob("*.yaml"))}
NIGHTLY = "MODELGEN_FUZZ_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("MODELGEN_FUZZ_EXAMPLES", 500))
SETTINGS = dict(
    derandomize=not NIGHTLY, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
ISSUE_LINE = re.compile(r"^(?P<file>[^\n]+\.yaml):(?P<line>\d+):(?P<col>\d+): (?P<field>[^\s:][^:]*: )?\S[^\n]*$")


def _extends_of(text: str) -> str | None:
    m = re.search(r"^extends: (\S+)", text, re.M)
    return m.group(1) if m else None


# ------------------------------------------------------------------------------------------------------ strategies
CONFIG_NAMES = sorted({n for t in TEXTS.values() for n in re.findall(r"^  ([a-z_]+):", t, re.M)})
NAMES = st.sampled_from(CONFIG_NAMES + ["i", "x", "nope", "__class__", "min", "open"])
HOSTILE = st.sampled_from([
    "", " ", "\"", "'", "\\", "\\N", "\n", "\r\n", "\u2028", '"""', "{}", "{e}", "{{", "}", "${x}", "%s", "\x00",
    "a\"; import os; os.system('x'); \"", "__import__('os')", "ü", "🦙", "a" * 300, "..", "/etc/passwd", "*", "#",
])
BINOPS = ["+", "-", "*", "/", "//", "%", "**", "<", "<=", "==", "!=", "in", "not in", "and", "or", "is", "is not"]


def _constant() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(min_value=-(2 ** 70), max_value=2 ** 70).map(str),
        st.sampled_from(["0", "1", "-1", "9", "2", "1e308", "1e-6", "0.5", "True", "False", "None", "[]", "()"]),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.text(max_size=6).map(repr),
    )


def _expression_text() -> st.SearchStrategy[str]:
    leaves = st.one_of(NAMES, _constant())

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, st.sampled_from(BINOPS), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(st.sampled_from(["-", "+", "not ", "~"]), inner).map(lambda t: f"{t[0]}{t[1]}"),
            st.tuples(st.sampled_from(sorted(FUNCTIONS) + ["open", "getattr", "x"]), st.lists(inner, max_size=3))
            .map(lambda t: f"{t[0]}({', '.join(t[1])})"),
            st.tuples(inner, inner).map(lambda t: f"{t[0]}[{t[1]}]"),
            st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
            st.lists(inner, max_size=4).map(lambda xs: f"[{', '.join(xs)}]"),
            st.tuples(inner, st.sampled_from(["__class__", "real", "x"])).map(lambda t: f"{t[0]}.{t[1]}"),
            st.tuples(inner, st.sampled_from(["lambda: 1", "[i for i in x]", "f'{x}'", "x := 1", "*x", "yield"]))
            .map(lambda t: f"{t[0]} + ({t[1]})"),
        )

    return st.recursive(leaves, extend, max_leaves=12)


EXPRESSIONS = _expression_text()
SCALARS = st.one_of(
    st.integers(min_value=-(2 ** 80), max_value=2 ** 80), st.floats(), st.booleans(), st.none(),
    st.text(max_size=20), HOSTILE, NAMES, EXPRESSIONS,
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(NAMES, HOSTILE, st.integers(0, 3)), inner, max_size=3),
), max_leaves=6)
FRAGMENTS = st.sampled_from([
    "&a", "*a", "x: &a [1, 2]", "y: *a", "<<: *a", "!remove", "z: !remove", "z: !replace {a: 1}", "!!python/none",
    "extends: llama.yaml", "extends: qwen3_moe.yaml", "extends: ../specs/llama.yaml", "extends: /etc/passwd",
    "? [a]\n: 1", "\t- tab", "---", "...", "%YAML 1.1", "key: |\n  text", "k: 'unterminated", "[", "{", "- - -",
    "k: 2001-12-14", "k: 0x1F", "k: .nan", "k: ~", "k: {extends: blocks.decoder}", "\x00", "\ufeff", "\u2028",
])


# ---------------------------------------------------------------------------------------------- mutating a spec
def _containers(node: Any, out: list[Any]) -> list[Any]:
    if isinstance(node, (CommentedMap, CommentedSeq)):
        out.append(node)
        for v in (node.values() if isinstance(node, CommentedMap) else node):
            _containers(v, out)
    return out


def _mutate_data(doc: CommentedMap, data: st.DataObject) -> None:
    containers = _containers(doc, [])
    node = containers[data.draw(st.integers(0, len(containers) - 1), label="container")]
    keys = list(node.keys()) if isinstance(node, CommentedMap) else list(range(len(node)))
    op = data.draw(st.sampled_from(["delete", "retype", "add", "rename", "graft"]), label="op")
    if op == "add" or not keys:
        value = data.draw(VALUES, label="new value")
        if isinstance(node, CommentedMap):
            node[data.draw(st.one_of(NAMES, HOSTILE, st.integers(0, 3)), label="new key")] = value
        else:
            node.append(value)
        return
    key = data.draw(st.sampled_from(keys), label="key")
    if op == "delete":
        del node[key]
    elif op == "retype":
        node[key] = data.draw(VALUES, label="value")
    elif op == "rename" and isinstance(node, CommentedMap):
        new = data.draw(st.one_of(NAMES, HOSTILE, st.just(str(key) + "s")), label="renamed")
        if new not in node:
            node.insert(list(node).index(key), new, node.pop(key))
    else:  # graft (a copy of) another part of the spec here: right shape, wrong place
        donor = containers[data.draw(st.integers(0, len(containers) - 1), label="donor")]
        node[key] = copy.deepcopy(donor)


def _dump(doc: Any) -> str:
    yaml = YAML(typ="rt")
    yaml.width = 4096
    buf = StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue()


def _mutate_text(text: str, data: st.DataObject) -> str:
    lines = text.split("\n")
    at = data.draw(st.integers(0, len(lines)), label="line")
    op = data.draw(st.sampled_from(["fragment", "duplicate", "truncate", "garbage", "replace"]), label="text op")
    if op == "fragment":
        indent = " " * data.draw(st.sampled_from([0, 2, 4, 6]), label="indent")
        lines.insert(at, indent + data.draw(FRAGMENTS, label="fragment"))
    elif op == "duplicate" and lines:
        lines.insert(at, lines[min(at, len(lines) - 1)])
    elif op == "truncate":  # past the header comment, so that the cut spec is still a mapping most of the time
        start = min(text.find("\nname:") + 1 if "\nname:" in text else 0, len(text))
        return text[: data.draw(st.integers(start, len(text)), label="cut")]
    elif op == "garbage":
        lines.insert(at, data.draw(st.text(max_size=30), label="garbage"))
    else:
        lines[min(at, len(lines) - 1)] = data.draw(st.text(max_size=40), label="replacement")
    return "\n".join(lines)


def _mutated_specs(data: st.DataObject) -> tuple[Path, Path, str]:
    """A temp spec directory holding every committed spec with one of them mutated; returns (dir, spec to build,
    mutated file name). The built spec is the mutated one or a spec that extends it (errors located in the base)."""
    name = data.draw(st.sampled_from(sorted(TEXTS)), label="spec")
    text = TEXTS[name]
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        if data.draw(st.booleans(), label="data-level"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # ruamel warns on reused anchors; the compiler refuses them
                    doc = YAML(typ="rt").load(text)
            except Exception:  # noqa: BLE001 - an earlier text mutation broke the YAML: keep mutating the text
                doc = None
            if isinstance(doc, CommentedMap) and len(doc):
                _mutate_data(doc, data)
                try:
                    text = _dump(doc)
                except Exception:  # noqa: BLE001 - ruamel cannot dump some grafts (a cycle); skip this mutation
                    pass
                continue
        text = _mutate_text(text, data)
    tmp = Path(tempfile.mkdtemp(prefix="modelgen-fuzz-"))
    for other, other_text in TEXTS.items():
        (tmp / other).write_text(other_text)
    raw = text.encode("utf-8", "surrogatepass")
    if data.draw(st.booleans(), label="raw bytes") and raw:
        pos = data.draw(st.integers(0, len(raw)), label="byte pos")
        raw = raw[:pos] + data.draw(st.binary(max_size=8), label="bytes") + raw[pos:]
    (tmp / name).write_bytes(raw)
    children = [n for n, t in TEXTS.items() if _extends_of(t) == name]
    target = data.draw(st.sampled_from([name] + children), label="built spec")
    return tmp, tmp / target, name


def _kind(err: ModelgenError) -> str:
    """A coarse label of the first issue, for `pytest --hypothesis-show-statistics`."""
    if not isinstance(err, SpecError):
        return type(err).__name__
    message = err.issues[0].message
    return "SpecError: " + re.sub(r"'[^']*'|\d+", "_", message)[:40]


def assert_located(err: ModelgenError, spec_dir: Path) -> None:
    """Every line of a SpecError is file:line:col: message in one of the spec files of this example."""
    text = str(err)
    assert text, "empty error message"
    if isinstance(err, CodegenError):
        return  # names a template, not a spec position (a generator bug, but a reported one)
    assert isinstance(err, SpecError) and err.issues
    for line in text.split("\n"):
        m = ISSUE_LINE.match(line)
        assert m, f"not a located one-line issue: {line!r}"
        assert Path(m["file"]).parent == spec_dir, f"issue names a file outside the spec dir: {line!r}"
        assert int(m["line"]) >= 1 and int(m["col"]) >= 1


# ------------------------------------------------------------------------------------------------------ properties
@settings(max_examples=EXAMPLES, deadline=timedelta(seconds=10), **SETTINGS)
@given(data=st.data())
def test_mutated_specs_compile_or_fail_located(data):
    """Load, schema, lower, evaluate: success or located SpecErrors, nothing else."""
    spec_dir, spec, _ = _mutated_specs(data)
    try:
        compile_spec(spec)
        check_spec_file(spec)
        event("compiled")
    except ModelgenError as e:
        event(_kind(e))
        assert_located(e, spec_dir)
    finally:
        shutil.rmtree(spec_dir)


@settings(max_examples=EXAMPLES, deadline=timedelta(seconds=2), **SETTINGS)
@given(text=EXPRESSIONS, env=st.dictionaries(NAMES, VALUES, max_size=6))
def test_random_expressions_parse_evaluate_render_or_fail_with_expr_error(text, env):
    try:
        expr = parse_expr(text)
    except ExprError as e:
        assert str(e) and "\n" not in str(e) and e.col >= 0
        return
    assert expr.to_python(lambda n: f"config.{n}")  # rendering a checked expression never fails
    try:
        value = expr.evaluate(env)
    except ExprError as e:
        assert str(e) and "\n" not in str(e)
        return
    if isinstance(value, int) and not isinstance(value, bool):
        assert value.bit_length() <= 4096
    if isinstance(value, float):
        assert math.isfinite(value) or math.isnan(value) or math.isinf(value)
    if isinstance(value, (str, list, tuple)):
        assert len(value) <= 10_000


@settings(max_examples=max(EXAMPLES // 20, 10), deadline=timedelta(seconds=30), **SETTINGS)
@given(data=st.data())
def test_mutated_specs_build_completely_or_not_at_all(data):
    """The whole pipeline including render and write, into a fresh directory: all files or none."""
    spec_dir, spec, _ = _mutated_specs(data)
    out = spec_dir / "out"
    targets = data.draw(st.sampled_from([(t,) for t in TARGETS]), label="target")
    try:
        written = build([spec], targets, out_dir=out)
        event("built")
    except ModelgenError as e:
        event(_kind(e))
        assert_located(e, spec_dir)
        assert not out.exists() or not any(out.rglob("*")), "a failed build wrote files"
    else:
        assert written and all(p.is_file() for p in written)
        assert not list(out.rglob("*.tmp"))
    finally:
        shutil.rmtree(spec_dir)
