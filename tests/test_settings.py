"""modelgen/settings.py: every MODELGEN_* variable is declared once, validated where it is read (one line naming the
variable and what it allows), read nowhere else, and the README's environment table is the module's."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from modelgen import settings

REPO = Path(__file__).resolve().parents[1]
# The product reads variables only through settings.get. Not scanned for reads: tests/ (their own variables,
# MODELGEN_REGEN_GOLDEN, ...) and bench/, which sets and restores variables around its A/B legs as raw strings.
PRODUCT = ("codegen", "runtime", "modelgen", "cli")
BEGIN, END = "<!-- settings-table: python -m modelgen.settings --markdown -->", "<!-- /settings-table -->"


def _python_files(folders=PRODUCT):
    for folder in folders:
        yield from sorted((REPO / folder).rglob("*.py"))


@pytest.mark.parametrize("name,bad", [("MODELGEN_BACKEND", "cuda"), ("MODELGEN_CUDA_GRAPHS", "yes"),
                                      ("MODELGEN_NUM_THREADS", "0"), ("MODELGEN_DIST_TIMEOUT", "soon"),
                                      ("MODELGEN_GEMV", "fast"), ("MODELGEN_PDL", "3")])
def test_a_value_it_does_not_allow_is_one_line_naming_the_variable_and_the_choices(monkeypatch, name, bad):
    monkeypatch.setenv(name, bad)
    with pytest.raises(settings.SettingError) as e:
        settings.get(name)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{name}={bad!r}: expected ")
    allowed = settings.declared(name).allowed()
    assert message.endswith(allowed)
    for choice in settings.declared(name).choices:
        assert choice in message


def test_values_are_typed_and_unset_or_empty_is_the_default(monkeypatch):
    monkeypatch.setenv("MODELGEN_CUDA_GRAPHS", "0")
    assert settings.get("MODELGEN_CUDA_GRAPHS") is False
    monkeypatch.setenv("MODELGEN_LOADER_NUM_THREADS", " 4 ")
    assert settings.get("MODELGEN_LOADER_NUM_THREADS") == 4
    monkeypatch.setenv("MODELGEN_DIST_TIMEOUT", "2.5")
    assert settings.get("MODELGEN_DIST_TIMEOUT") == 2.5
    monkeypatch.setenv("MODELGEN_DIST_TIMEOUT", "nan")  # not > 0
    with pytest.raises(settings.SettingError):
        settings.get("MODELGEN_DIST_TIMEOUT")
    monkeypatch.setenv("MODELGEN_BACKEND", "")
    assert settings.get("MODELGEN_BACKEND") is None
    monkeypatch.delenv("MODELGEN_LOADER_NUM_THREADS")
    assert settings.get("MODELGEN_LOADER_NUM_THREADS") == 16
    with pytest.raises(KeyError, match="MODELGEN_NO_SUCH is not declared"):
        settings.get("MODELGEN_NO_SUCH")


def test_every_default_is_a_value_the_setting_allows():
    for s in settings.SETTINGS.values():
        if s.default is None or s.type == settings.TEXT:
            continue
        text = {True: "1", False: "0"}.get(s.default, str(s.default)) if s.type == settings.FLAG else str(s.default)
        assert s.parse(text) == s.default, s.name


def test_readme_table_is_the_modules():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "README lost its settings-table markers"
    table = text.split(BEGIN)[1].split(END)[0].strip("\n") + "\n"
    assert table == settings.markdown_table(), "README's environment table is stale: paste `python -m " \
                                               "modelgen.settings --markdown` between its markers"


def test_a_bad_value_stops_any_command_in_one_line():
    env = {**os.environ, "MODELGEN_COMPILE_CACHE": "off"}  # `list` reads the compile cache (codegen/cache.py)
    r = subprocess.run([sys.executable, "-m", "modelgen.cli", "list"], capture_output=True, text=True, cwd=REPO,
                       env=env)
    assert r.returncode == 1
    assert r.stderr == "modelgen list: MODELGEN_COMPILE_CACHE='off': expected 0 or 1\n"


def test_markdown_command_prints_the_table():
    out = subprocess.run([sys.executable, "-m", "modelgen.settings", "--markdown"], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout
    assert out == settings.markdown_table()
    for name in settings.SETTINGS:
        assert f"| `{name}` |" in out


def _environ_reads(tree: ast.AST):
    """(line, variable) of every os.environ[...] / os.environ.get(...) / os.getenv(...) of a literal or a module
    constant whose value is a MODELGEN_* name."""
    constants = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                 for t in n.targets if isinstance(t, ast.Name)}

    def name_of(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return constants.get(node.id)
        return None

    def is_environ(node):
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.ctx, ast.Load):
            key = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            f = node.func
            if (f.attr == "get" and is_environ(f.value)) or f.attr == "getenv":
                key = node.args[0]
        elif isinstance(node, ast.Compare) and any(isinstance(op, ast.In) for op in node.ops) \
                and any(is_environ(c) for c in node.comparators):
            key = node.left
        name = name_of(key) if key is not None else None
        if name and name.startswith("MODELGEN_"):
            yield node.lineno, name


def test_no_modelgen_variable_is_read_outside_the_settings_module():
    found = []
    for path in _python_files():
        if path == REPO / "modelgen" / "settings.py":
            continue
        for line, name in _environ_reads(ast.parse(path.read_text(encoding="utf-8"))):
            found.append(f"{path.relative_to(REPO)}:{line}: {name}")
    assert not found, "read these through modelgen.settings.get:\n" + "\n".join(found)


def test_the_scan_sees_each_kind_of_read():
    # The guard above is only as good as this scan: every form of read must be caught.
    sample = ast.parse("import os\nENV = 'MODELGEN_X'\nos.environ['MODELGEN_A']\nos.environ.get('MODELGEN_B')\n"
                       "os.getenv('MODELGEN_C')\nos.environ.get(ENV)\n'MODELGEN_D' in os.environ\n"
                       "os.environ['MODELGEN_E'] = '1'\nos.environ.get('HOME')\n")
    assert [n for _, n in _environ_reads(sample)] == ["MODELGEN_A", "MODELGEN_B", "MODELGEN_C", "MODELGEN_X",
                                                      "MODELGEN_D"]


def test_every_variable_the_product_names_is_declared():
    # A MODELGEN_* name in product code, its docs or the bench scripts (a docstring, a bench leg, a help text) that
    # the module does not declare is a switch that was removed or never declared.
    # bench/NOTES-*.md keep the history of removed switches and are not scanned.
    docs = [REPO / "README.md", REPO / "SECURITY.md", *sorted((REPO / "bench").glob("*.sh"))]
    names = set()
    for path in [*_python_files(PRODUCT + ("bench",)), *docs]:
        names |= set(re.findall(r"\bMODELGEN_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8")))
    names -= {"MODELGEN_NORMS", "MODELGEN_NAME"}  # a constant (codegen/vllm_names.py); bench/moe.py's placeholder
    assert names - set(settings.SETTINGS) == set()
