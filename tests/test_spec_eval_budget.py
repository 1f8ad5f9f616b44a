"""Bounded spec evaluation (issue 27 items 2 and 6): every expression finishes fast or is refused, located.

`[[[1]*10000]*10000]*10000 == ...` used to pass every bound (only the top-level length was checked) and hang
`modelgen build`, `check` and `list`; a default of `"[[0]*10000]*10000"` gave a 300 MB error message. Each case
here runs under a time bound: in-process ones assert the elapsed time, the commands run in a subprocess with a
timeout (a hang there cannot be interrupted from inside). The fuzzer at the end generates amplifying expressions.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest

from modelgen.codegen import expr as expr_module
from modelgen.codegen.errors import SpecError
from modelgen.codegen.evaluate import check_spec_file
from modelgen.codegen.expr import MAX_ELEMENTS, MAX_SHOWN, ExprError, parse_expr, shared_budget
from modelgen.codegen.lower import compile_spec
from tests.test_spec_bounds import llama_with

REPO = Path(__file__).resolve().parent.parent
LLAMA = REPO / "specs" / "llama.yaml"
LOCATED = re.compile(r"^[^\n]+\.yaml:\d+:\d+: [^\n]+$")
BOUND_S = 2.0  # far above the budget's ~0.1 s, far below a hang; the 2-core CI machine is shared

BOMB = "[[[1]*10000]*10000]*10000 == [[[1]*10000]*10000]*10000"


@contextmanager
def within(seconds: float = BOUND_S):
    start = time.perf_counter()
    yield
    elapsed = time.perf_counter() - start
    assert elapsed < seconds, f"took {elapsed:.2f} s (bound {seconds} s)"


def with_requires(tmp_path: Path, check: str) -> Path:
    return llama_with(tmp_path, "  - check: hidden_act == 'silu'", f"  - check: {json.dumps(check)}")


# ------------------------------------------------------------------------------------------ the expression level
@pytest.mark.parametrize("text", [
    BOMB,
    "[[0]*10000]*10000",
    "[[1]*10000]*10000 == [[1]*10000]*10000",
    "len([[[1]*100]*100]*100)",  # 10^6 references: over the footprint bound although each list is short
    "[['ab'*5000]*10000] == 1",
    "['x'*10000]*1000 + ['y'*10000]*1000",
])
def test_amplifying_constants_are_refused_at_parse(text):
    with within(), pytest.raises(ExprError, match="elements|longer than") as e:
        parse_expr(text)
    assert e.value.col >= 0 and len(str(e.value)) < 300


@pytest.mark.parametrize("text, env", [
    ("x == y", {"x": [[1] * 998] * 1000, "y": [[1] * 998] * 1000}),  # just under 10^6 each: allowed, ~10 ms
    ("len([x] * 10) + len([x] * 10)", {"x": list(range(1000))}),
    ("['full_attention'] * 10000 == ['full_attention'] * 10000", {}),  # a 10k-layer schedule still fine
])
def test_large_but_bounded_values_still_evaluate(text, env):
    with within():
        parse_expr(text).evaluate(env)


def test_footprint_counts_each_reference_to_a_shared_list():
    inner = [1] * 1000
    with pytest.raises(ExprError, match=f"more than {MAX_ELEMENTS} elements"):
        parse_expr("[x] * 2000").evaluate({"x": inner})  # 2000 references x 1000 elements
    assert parse_expr("[x] * 900").evaluate({"x": inner})[0] is inner


def test_many_cheap_steps_exhaust_the_budget():
    # Each comparison walks ~9 * 10^5 elements: under the per-value bound, but twelve of them pass 10^7.
    assert expr_module.MAX_EVAL_COST == 10_000_000
    text = " and ".join(["x == y"] * 12)
    env = {"x": [[1] * 450] * 1000, "y": [[1] * 450] * 1000}
    parse_expr(" and ".join(["x == y"] * 10)).evaluate(env)  # ten are within it
    with within(), pytest.raises(ExprError, match="steps"):
        parse_expr(text).evaluate(env)


def test_deeply_nested_values_are_refused():
    value: list = [1]
    for _ in range(40):
        value = [value]
    with within(), pytest.raises(ExprError, match="nested deeper"):
        parse_expr("x == x").evaluate({"x": value})


def test_one_pool_bounds_all_expressions_of_a_spec():
    # Many expressions each under the per-evaluation budget still stop at the spec's shared pool.
    with within(), shared_budget(3_000_000), pytest.raises(ExprError, match="together"):
        for _ in range(50):
            parse_expr("len([[1] * 98] * 10000) == len([[1] * 98] * 10000)")


def test_error_messages_shorten_values():
    with pytest.raises(ExprError) as e:
        parse_expr("int(s)").evaluate({"s": "x" * 5000})
    assert len(str(e.value)) <= MAX_SHOWN + 40, len(str(e.value))
    with pytest.raises(ExprError) as e:
        parse_expr("r[k]").evaluate({"r": {}, "k": "k" * 5000})
    assert len(str(e.value)) <= MAX_SHOWN + 40


# ---------------------------------------------------------------------------------------------- the spec level
def test_requires_bomb_is_refused_located_and_fast(tmp_path):
    p = with_requires(tmp_path, BOMB)
    with within(), pytest.raises(SpecError) as e:
        compile_spec(p)
    assert LOCATED.match(str(e.value)), str(e.value)
    assert "requires.0.check" in str(e.value) and "elements" in str(e.value)
    with within():  # evaluation alone leaves parse errors to lowering (above), but must not hang on them either
        check_spec_file(p)


def test_huge_default_error_is_short(tmp_path):
    p = llama_with(tmp_path, "default: 2048", 'default: "[[0]*10000]*10000"')
    with within(), pytest.raises(SpecError) as e:
        compile_spec(p)
    msg = str(e.value)
    assert LOCATED.match(msg) and len(msg) < 500, msg[:1000]


def test_bad_default_value_is_quoted_short(tmp_path):
    # A default of the wrong type is quoted in the message: shortened, whatever its size.
    p = llama_with(tmp_path, "default: 2048", 'default: "[[0] * 999] * 999"')
    with within(), pytest.raises(SpecError, match="declared `type: int`") as e:
        compile_spec(p)
    assert len(str(e.value)) < 600, len(str(e.value))


@pytest.mark.parametrize("command", ["build", "check", "list"])
def test_commands_finish_on_an_expression_bomb(tmp_path, command):
    """The CI case: a pull request adding this spec must not hang build, check or list."""
    specs = tmp_path / "specs"
    specs.mkdir()
    with_requires(specs, BOMB)
    (specs / "spec.yaml").rename(specs / "bomb.yaml")
    # Point the commands at this specs/ and a scratch generated/: nothing of the repository is touched.
    script = (
        "import sys; from pathlib import Path; import modelgen.codegen.build as b, modelgen.codegen.lower as l; "
        f"b.SPECS_DIR = l.SPECS_DIR = Path({str(specs)!r}); out = Path({str(tmp_path / 'out')!r}); "
        "b.GENERATED_DIR = out; b.build.__defaults__ = (out, False); b.check.__defaults__ = (out,); "
        "from modelgen.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    args = {"build": ["build", str(specs / "bomb.yaml")], "check": ["check"], "list": ["list"]}[command]
    start = time.perf_counter()
    env = {**os.environ, "MODELGEN_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120, env=env)
    elapsed = time.perf_counter() - start
    assert elapsed < 90, f"{command} took {elapsed:.0f} s"
    assert "Traceback" not in r.stderr, r.stderr
    assert "bomb.yaml:" in r.stderr + r.stdout, (r.stdout, r.stderr)
    if command != "list":
        assert r.returncode == 1, (r.stdout, r.stderr)


# ---------------------------------------------------------------------------------------------------- the fuzzer
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_ATOMS = st.sampled_from(["1", "0", "'ab'", "[1]", "[[1]]", "[]", "x", "n", "10000", "9999", "100", "-1", "2.5",
                          "True", "None", "'x' * 10", "[0] * 100"])


def _amplifying(children):
    # Repetition, concatenation, nesting, comparison and calls: the operations whose cost grows with the values.
    return st.one_of(
        st.tuples(children, st.sampled_from(["*", "+", "==", "<", "in", "!=", "//", "%", "**"]), children).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.lists(children, min_size=1, max_size=4).map(lambda xs: f"[{', '.join(xs)}]"),
        st.tuples(st.sampled_from(["len", "min", "max", "bool", "int", "abs"]), children).map(
            lambda t: f"{t[0]}({t[1]})"),
        st.tuples(children, children).map(lambda t: f"{t[0]}[{t[1]}]"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
    )


EXPRESSIONS = st.recursive(_ATOMS, _amplifying, max_leaves=12)
FUZZ_BOUND_S = 1.0


@settings(max_examples=300, deadline=timedelta(seconds=FUZZ_BOUND_S), derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(text=EXPRESSIONS)
def test_fuzz_expressions_evaluate_or_refuse_located_within_the_bound(text):
    env = {"x": [[1] * 100] * 100, "n": 10000}
    start = time.perf_counter()
    try:
        parse_expr(text).evaluate(env)
    except ExprError as e:
        assert str(e) and "\n" not in str(e) and e.col >= 0 and len(str(e)) < 600
    assert time.perf_counter() - start < FUZZ_BOUND_S


_LLAMA_TEXT = LLAMA.read_text()


@settings(max_examples=40, deadline=timedelta(seconds=10), derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=EXPRESSIONS)
def test_fuzz_requires_lines_compile_or_fail_with_a_located_spec_error(tmp_path, text):
    """The same expressions as one `requires:` line of a spec: a located SpecError or a build, never another
    exception, within the bound."""
    p = tmp_path / "fuzz.yaml"
    p.write_text(_LLAMA_TEXT.replace("  - check: hidden_act == 'silu'", f"  - check: {json.dumps(text)}", 1))
    assert json.dumps(text) in p.read_text()
    start = time.perf_counter()
    try:
        compile_spec(p)
    except SpecError as e:
        for line in str(e).split("\n"):
            assert LOCATED.match(line), line
    assert time.perf_counter() - start < 5
