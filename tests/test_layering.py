"""The layers of the house: the compiler (codegen/) never imports the runtime, neither imports the CLI, and the top
package's own modules (settings, targets) import nothing of modelgen's; the one ``modelgen`` command lists every
subcommand."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUBCOMMANDS = ("build", "check", "list", "schema", "new", "verify", "coverage", "run", "serve")


def _imports(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path`` (or ``source``, as if it were that file),
    function-level ones included, relative ones resolved against the module's ``modelgen.`` name."""
    parts = list(path.relative_to(REPO).parts[:-1])  # a module's package is its folder, an __init__.py's too
    package = ["modelgen"] + (parts[1:] if parts[:1] == ["modelgen"] else parts)
    found = []
    text = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            found += [(node.lineno, f"{name}.{a.name}") for a in node.names]  # `from modelgen import runtime`
    return found


def _offenders(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in sorted((REPO / folder).rglob("*.py")):
        for line, name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(REPO)}:{line}: imports {name}")
    return bad


def test_the_compiler_never_imports_the_runtime_or_the_cli():
    assert _offenders("codegen", ("modelgen.runtime", "modelgen.cli")) == []


def test_the_runtime_never_imports_the_compiler_or_the_cli():
    assert _offenders("runtime", ("modelgen.codegen", "modelgen.cli")) == []


def test_the_top_package_stands_on_the_standard_library():
    # modelgen/__init__.py names the runtime's public API lazily (inside __getattr__); settings.py and targets.py,
    # which both layers import, import nothing of modelgen's at all.
    for name in ("settings.py", "targets.py"):
        assert [n for _, n in _imports(REPO / "modelgen" / name) if n.startswith("modelgen")] == []


def test_the_scan_resolves_relative_imports():
    # The guards above see only what _imports resolves: a relative import of the runtime from codegen/ must show.
    source = "from ...runtime import host\nfrom .. import lower\nimport modelgen.runtime.hub\n"
    names = [n for _, n in _imports(REPO / "codegen" / "blocks" / "probe.py", source)]
    assert "modelgen.runtime" in names and "modelgen.runtime.host" in names and "modelgen.codegen.lower" in names
    assert "modelgen.runtime.hub" in names


def test_cli_help_lists_every_subcommand():
    r = subprocess.run([sys.executable, "-m", "modelgen.cli", "--help"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    listed = {line.split()[0] for line in r.stdout.splitlines() if line.startswith("    ") and line.split()}
    assert set(SUBCOMMANDS) <= listed, f"missing: {set(SUBCOMMANDS) - listed}"
