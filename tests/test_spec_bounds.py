"""Bounded spec parsing and evaluation: hostile or broken specs fail fast with one located line, never a traceback."""
from __future__ import annotations

import re
import time
import tracemalloc
from pathlib import Path

import pytest

from modelgen.codegen import yaml_source
from modelgen.codegen.build import build
from modelgen.codegen.errors import SpecError
from modelgen.codegen.evaluate import check_spec_file
from modelgen.codegen.expr import MAX_INT_BITS, MAX_SEQ_LEN, ExprError, parse_expr
from modelgen.codegen.lower import compile_spec

LLAMA = Path(__file__).resolve().parent.parent / "specs" / "llama.yaml"
LOCATED = re.compile(r"^[^\n]+\.yaml:\d+:\d+: [^\n]+$")  # file:line:col: [field: ]message, one line


def write(tmp_path: Path, content: str | bytes, name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return p


def load_error(path: Path) -> str:
    with pytest.raises(SpecError) as e:
        yaml_source.load_yaml(path)
    msg = str(e.value)
    assert LOCATED.match(msg), msg  # exactly one located line
    return msg


def llama_with(tmp_path: Path, old: str, new: str) -> Path:
    text = LLAMA.read_text()
    assert old in text, old
    return write(tmp_path, text.replace(old, new, 1))


# ------------------------------------------------------------------------------------------------------- YAML layer
def test_spec_size_limit(tmp_path):
    p = write(tmp_path, "name: x\n" + "# padding\n" * (yaml_source.MAX_SPEC_BYTES // 10 + 1))
    assert "spec.yaml:1:1: spec is larger than 256 KiB" in load_error(p)


def test_alias_bomb_fails_fast_at_the_alias(tmp_path):
    # The "billion laughs" shape: 9 levels of 9 aliases, ~370 bytes of text, 9**10 values once expanded.
    names = "abcdefghij"
    lines = ["a: &a [x,x,x,x,x,x,x,x,x]"]
    for prev, n in zip(names, names[1:]):
        lines.append(f"{n}: &{n} [" + ",".join([f"*{prev}"] * 9) + "]")
    p = write(tmp_path, "\n".join(lines) + "\n")
    assert p.stat().st_size < 400
    tracemalloc.start()
    t0 = time.perf_counter()
    msg = load_error(p)
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert re.search(r"spec.yaml:(\d+):\d+: spec expands to more than \d+ values \(alias expansion\)", msg), msg
    line = int(msg.split(":")[1])
    assert ": &" in p.read_text().splitlines()[line - 1] and line > 1  # at an alias use, not at 1:1
    assert elapsed < 2 and peak < 50e6, (elapsed, peak)


def test_alias_use_count_limit(tmp_path):
    body = "x: &x 1\nl: [" + ", ".join(["*x"] * (yaml_source.MAX_ALIASES + 1)) + "]\n"
    assert f"more than {yaml_source.MAX_ALIASES} alias uses" in load_error(write(tmp_path, body))


def test_reused_anchor_is_refused(tmp_path):
    assert "spec.yaml:2:4: anchor &a is defined twice (first at line 1)" in load_error(
        write(tmp_path, "a: &a 1\nb: &a 2\nc: *a\n"))


def test_merge_keys_are_refused_located(tmp_path):
    """`<<: *anchor` keys have no position of their own (ruamel); they used to crash lowering with a TypeError."""
    msg = load_error(write(tmp_path, "name: x\nconfig: &a {b: int}\nderived:\n  <<: *a\n"))
    assert "spec.yaml:4:3: derived: YAML merge keys (<<) are not allowed" in msg


def test_recursive_and_undefined_aliases(tmp_path):
    assert "recursive alias" in load_error(write(tmp_path, "a: &a [1, *a]\n"))
    assert "has no anchor before it" in load_error(write(tmp_path, "a: *nope\n"))


@pytest.mark.parametrize("text", [
    "a: " + "[" * 100 + "]" * 100 + "\n",
    "".join(" " * (2 * i) + f"k{i}:\n" for i in range(60)) + " " * 120 + "v: 1\n",
    "a: &a " + "[" * 20 + "1" + "]" * 20 + "\nb: " + "[" * 20 + "*a" + "]" * 20 + "\n",  # deep only when expanded
])
def test_nesting_depth_limit(tmp_path, text):
    msg = load_error(write(tmp_path, text))
    assert f"deeper than {yaml_source.MAX_DEPTH} levels" in msg, msg


def test_non_utf8_is_located_at_the_byte(tmp_path):
    msg = load_error(write(tmp_path, b"name: llama\ndescription: caf\xe9 \xff\n"))
    assert "spec.yaml:2:17: spec is not valid UTF-8 text (byte 0xe9)" in msg, msg


@pytest.mark.parametrize("blob", [bytes(range(256)), bytes(range(255, -1, -1)) * 3, b"\x00\x01\x02name: x",
                                  b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"name: \x07bell\n"])
def test_random_bytes_give_one_located_line(tmp_path, blob):
    load_error(write(tmp_path, blob))


@pytest.mark.parametrize("text, where", [
    ("a: !foo [1, 2]\n", "1:4"),
    ("a: !!python/object/apply:os.system ['echo pwned']\n", "1:4"),
    ("a: 1\nb: !!python/name:os.system\n", "2:4"),
    ("a: !!str 1\n", "1:4"),  # even standard tags: specs are plain data
    ("a: !remove x\n", "1:4"),  # !remove takes no value
    ("a: !replace [1]\n", "1:4"),  # !replace is for mappings
    ("? !remove k\n: 1\n", "1:3"),  # not on keys
])
def test_yaml_tags_are_refused_before_construction(tmp_path, text, where):
    msg = load_error(write(tmp_path, text))
    assert f"spec.yaml:{where}: YAML tag" in msg and "is not allowed" in msg, msg


def test_collection_keys_duplicates_and_documents(tmp_path):
    assert "mapping keys must be plain scalars" in load_error(write(tmp_path, "? [a, b]\n: 1\n"))
    assert re.search(r"spec.yaml:2:1: .*duplicate", load_error(write(tmp_path, "a: 1\na: 2\n")), re.I)
    assert "YAML syntax error" in load_error(write(tmp_path, "a: 1\n---\nb: 2\n"))
    assert "must be a YAML mapping" in load_error(write(tmp_path, "- 1\n"))


def test_unreadable_spec(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    assert "dir.yaml:1:1: cannot read spec" in load_error(tmp_path / "dir.yaml")


# ------------------------------------------------------------------------------------------------------ expressions
@pytest.mark.parametrize("text, fragment", [
    ("9 ** 9 ** 9", f"wider than {MAX_INT_BITS} bits"),
    ("2 ** 5000", f"wider than {MAX_INT_BITS} bits"),
    ("10 ** 1000 * 10 ** 1000", f"wider than {MAX_INT_BITS} bits"),
    ("'x' * 100000 * 100000", f"longer than {MAX_SEQ_LEN}"),
    ("[0] * 10 ** 6", f"longer than {MAX_SEQ_LEN}"),
    ("'%0999999999d' % 1", "string formatting"),
    ("(-8) ** 0.5", "complex result"),
    ("2.0 ** 5000", "OverflowError"),
    ("1 // 0", "ZeroDivisionError"),
    ("1 + 'a'", "TypeError"),
    ("min", "is a function, not a value"),
    ("max(len, 2)", "is a function, not a value"),
    ("x" * 2000, "longer than 1000 characters"),
    ("-" * 100 + "x", "nested deeper than"),
    ("a" + " + a" * 200, "more than 300 parts"),
    ("'a\x00'", "null bytes"),
])
def test_expression_bounds_refused_at_parse(text, fragment):
    with pytest.raises(ExprError, match=re.escape(fragment)):
        parse_expr(text)


@pytest.mark.parametrize("text, env, fragment", [
    ("2 ** n", {"n": 10_000}, "wider than"),
    ("s * n", {"s": "ab", "n": 10 ** 9}, "longer than"),
    ("a + a", {"a": list(range(MAX_SEQ_LEN))}, "longer than"),
    ("h // d", {"h": 8, "d": "x"}, "TypeError"),
    ("h[3]", {"h": [1]}, "IndexError"),
    ("r['factor']", {"r": {}}, "KeyError"),
    ("int(s)", {"s": "x"}, "ValueError"),
])
def test_expression_bounds_at_evaluation(text, env, fragment):
    with pytest.raises(ExprError, match=fragment):
        parse_expr(text).evaluate(env)


def test_in_bounds_values_still_evaluate():
    assert parse_expr("2 ** 64").evaluate({}) == 2 ** 64
    assert parse_expr("[0] * n").evaluate({"n": 48}) == [0] * 48
    assert parse_expr("head_dim ** -0.5").evaluate({"head_dim": 64}) == 0.125


# --------------------------------------------------------------------------------- build-time evaluation of a spec
@pytest.mark.parametrize("old, new, field, fragment", [
    ("default: 2048", "default: min", "config.max_position_embeddings.default", "is a function"),
    ("default: 2048", "default: 9 ** 9 ** 9", "config.max_position_embeddings.default", "wider than"),
    ("default: 2048", "default: 1.5", "config.max_position_embeddings.default", "declared `type: int`"),
    ("default: false}\n  mlp_bias", "default: 1}\n  mlp_bias", "config.attention_bias.default",
     "declared `type: bool`"),
    ("default: hidden_size // num_attention_heads", 'default: hidden_size // "x"', "config.head_dim.default",
     "TypeError"),
    ("eps: rms_norm_eps}\n    attention:", "eps: rms_norm_eps + 'a'}\n    attention:",
     "blocks.decoder.attention_norm.eps", "TypeError"),
    ("count: num_hidden_layers", "count: 2.5", "layers.count", "not a non-negative integer"),
    ("theta: rope_theta", "theta: rope_theta * 'x'", "blocks.decoder.attention.rope.theta", "TypeError"),
])
def test_spec_expressions_are_evaluated_at_build(tmp_path, old, new, field, fragment):
    p = llama_with(tmp_path, old, new)
    with pytest.raises(SpecError) as e:
        compile_spec(p)
        check_spec_file(p)
    msg = str(e.value)
    line = next(i for i, text in enumerate(p.read_text().splitlines(), 1) if new.split("\n")[0] in text)
    assert re.match(rf"{re.escape(str(p))}:{line}:\d+: {re.escape(field)}: .*{re.escape(fragment)}", msg), msg


def test_build_refuses_a_type_error_and_writes_nothing(tmp_path):
    p = llama_with(tmp_path, "default: hidden_size // num_attention_heads", 'default: hidden_size // "x"')
    out = tmp_path / "out"
    with pytest.raises(SpecError, match="config.head_dim.default: cannot evaluate: TypeError"):
        build([p], ("rocm", "neuron"), out_dir=out)
    assert not out.exists()


def test_value_errors_only_when_they_do_not_depend_on_sampled_fields(tmp_path):
    # num_attention_heads is required, so the build evaluates with a sample value (the 5th required int: 128); a
    # zero divisor there says nothing about real configs: no error.
    p = llama_with(tmp_path, "default: hidden_size // num_attention_heads",
                   "default: hidden_size // (num_attention_heads - 128)")
    compile_spec(p)
    check_spec_file(p)
    # max_position_embeddings has a default, so a zero divisor from it is certain: error.
    p = llama_with(tmp_path, "default: hidden_size // num_attention_heads",
                   "default: 1 // (max_position_embeddings - 2048)")
    with pytest.raises(SpecError, match=r"config.head_dim.default: cannot evaluate: ZeroDivisionError"):
        check_spec_file(p)


# ----------------------------------------------------------------------------------------------------- the command
@pytest.mark.parametrize("content", [
    b"\xff\xfe\x00garbage" * 10,
    b"a: &a [x,x,x,x,x,x,x,x,x]\n" + b"".join(
        b"%c: &%c [" % (n, n) + b",".join([b"*%c" % (n - 1)] * 9) + b"]\n" for n in range(ord("b"), ord("k"))),
    b"name: x\nhf: !!python/object/apply:os.system ['echo pwned']\n",
    LLAMA.read_bytes().replace(b"default: 2048", b"default: 9 ** 9 ** 9"),
    LLAMA.read_bytes().replace(b"default: 2048", b"default: min"),
])
def test_cli_build_prints_one_located_line_and_exits_1(tmp_path, content):
    import subprocess
    import sys

    p = write(tmp_path, content)
    # The command as users run it, but writing into tmp_path should a regression let the spec through.
    cli = ("import sys; from pathlib import Path; from modelgen.codegen import build; "
           f"build.build.__defaults__ = (Path({str(tmp_path / 'out')!r}), False); "
           "from modelgen.cli import main; sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", cli, "build", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{p}:"), r.stderr  # no traceback
    assert "pwned" not in r.stdout
