"""The engine's import structure (issue 25 item 2), read from the source with ``ast`` (nothing imported): no cycle
among runtime/engine/ and runtime/parallel/launch.py, speculative decoding and the launcher never import the
``LLM`` front, nothing there imports upward (the server, the CLI, the compiler), and imports inside functions carry
a comment saying why."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "runtime/engine").glob("*.py")) + [ROOT / "runtime/parallel/launch.py"]


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _imports(path: Path) -> list[tuple[str, ast.stmt]]:
    """(imported module, statement) for every import of ``path``, function-level ones too; relative imports
    resolved; ``from pkg import name`` yields ``pkg.name`` when that is a module of the tree, else ``pkg``."""
    package = _module(path).rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name.removeprefix("modelgen."), node) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = (node.module or "").removeprefix("modelgen.")
            for a in node.names:
                sub = f"{mod}.{a.name}"
                is_module = (ROOT / Path(*sub.split("."))).with_suffix(".py").exists() or \
                    (ROOT / Path(*sub.split("."))).is_dir()
                out.append((sub if is_module else mod, node))
    return out


def _graph() -> dict[str, set[str]]:
    mine = {_module(p) for p in FILES}
    return {_module(p): {m for m, _ in _imports(p) if m in mine} for p in FILES}


def test_the_graph_is_read():
    """The check below sees real edges (a parser that found none would pass it)."""
    g = _graph()
    assert "runtime.engine.scheduler" in g["runtime.engine.llm"]
    assert "runtime.engine.model_build" in g["runtime.engine.speculative"]
    assert "runtime.engine.scheduler" in g["runtime.engine.speculative"]


def test_no_import_cycle():
    g = _graph()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(g[node]):
            assert state.get(nxt) != 1, f"import cycle: {' -> '.join(path + [node, nxt])}"
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node, [])


def test_speculative_and_the_launcher_do_not_import_the_front():
    for name in ("runtime/engine/speculative.py", "runtime/parallel/launch.py", "runtime/engine/scheduler.py",
                 "runtime/engine/model_build.py", "runtime/engine/pipelined.py"):
        imported = {m for m, _ in _imports(ROOT / name)}
        assert "runtime.engine.llm" not in imported, f"{name} imports runtime/engine/llm.py"


def test_the_launcher_stands_below_the_engine():
    """launch.py is handed its build callback: it imports nothing of runtime/engine/ (the Work items it builds for
    the followers' runners live in runtime/work.py, below both)."""
    imported = {m for m, _ in _imports(ROOT / "runtime/parallel/launch.py")}
    assert not {m for m in imported if m.startswith("runtime.engine")}, imported
    assert "runtime.work" in imported


def test_no_upward_import():
    for path in FILES:
        for mod, node in _imports(path):
            assert not mod.startswith(("runtime.server", "codegen", "bench")), \
                f"{path.relative_to(ROOT)}:{node.lineno} imports {mod} (above the engine)"


def test_function_level_imports_say_why():
    for path in FILES:
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and node.col_offset > 0:
                here, above = lines[node.lineno - 1], lines[node.lineno - 2]
                assert "#" in here or above.strip().startswith("#"), \
                    f"{path.relative_to(ROOT)}:{node.lineno}: an import inside a function without a comment saying why"


def _kind_names() -> set[str]:
    """Every name a layer kind goes by: the compiler's block kinds (codegen/blocks/), the runtime's kind folders
    (runtime/layers/<kind>/) and every cache kind a spec class declares (``kind: str = "..."``, ``CACHE_KIND``)."""
    names = {p.stem for p in (ROOT / "codegen/blocks").glob("*.py") if not p.stem.startswith("_")}
    names |= {p.name for p in (ROOT / "runtime/layers").iterdir() if (p / "__init__.py").is_file()}
    for path in (ROOT / "runtime").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
            if isinstance(target, ast.Name) and target.id in ("kind", "CACHE_KIND") and \
                    isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                names.add(node.value.value)
    return names - {"__init__"}


def _kind_strings(paths) -> list[str]:
    names = _kind_names()
    return [f"{p.relative_to(ROOT)}:{n.lineno}: {n.value!r}" for p in paths for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names]


def test_the_engine_and_the_server_name_no_layer_kind():
    # They ask the LayerKind protocol (runtime/layers/kind.py) or the cache spec (KVSpec.paged / request_states):
    # a new kind must not need an engine branch.
    names = _kind_names()
    assert {"recurrent_state", "paged_latent", "paged_kv", "mla", "moe", "gated_deltanet"} <= names, names
    paths = sorted((ROOT / "runtime/engine").rglob("*.py")) + sorted((ROOT / "runtime/server").rglob("*.py"))
    assert _kind_strings(paths) == []
    assert _kind_strings([ROOT / "runtime/state_cache.py"]) != []  # the scan sees a kind string where one is
