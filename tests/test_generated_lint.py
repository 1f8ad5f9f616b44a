"""The committed generated code reads cleanly: no unused imports or variables (pyflakes), lines <= 120 columns."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

GENERATED = Path(__file__).resolve().parent.parent / "generated"
MAX_LINE = 120


def generated_sources() -> list[Path]:
    files = sorted(p for p in GENERATED.rglob("*.py") if "__pycache__" not in p.parts)
    assert len(files) > 20, "generated/ looks empty: run `modelgen build --all`"
    return files


def test_pyflakes_finds_nothing():
    pyflakes_api = pytest.importorskip("pyflakes.api", reason="pyflakes is in the `test` extra")
    from pyflakes.reporter import Reporter

    out, err = io.StringIO(), io.StringIO()
    reporter = Reporter(out, err)
    count = sum(pyflakes_api.check(p.read_text(encoding="utf-8"), str(p), reporter) for p in generated_sources())
    assert count == 0, out.getvalue() + err.getvalue()


def test_pyflakes_check_is_live():
    """The check above can fail: pyflakes reports an unused import and an unused local in generated-style code."""
    pyflakes_api = pytest.importorskip("pyflakes.api", reason="pyflakes is in the `test` extra")
    from pyflakes.reporter import Reporter

    out = io.StringIO()
    source = "import torch\n\n\ndef f():\n    unused = 1\n"
    assert pyflakes_api.check(source, "x.py", Reporter(out, io.StringIO())) == 2, out.getvalue()


def test_lines_fit_120_columns():
    long = [
        f"{p.relative_to(GENERATED.parent)}:{n}: {len(line)} columns"
        for p in generated_sources()
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > MAX_LINE
    ]
    assert not long, "\n".join(long)
