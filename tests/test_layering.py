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


# ------------------------------------------------------------------------------------------- the whole house's map
# The map the structure tool draws (issue 25): a room is a folder of runtime/ (runtime/layers/, runtime/loader/, ...),
# a single module of runtime/ or modelgen/, or one of codegen/, cli/, bench/. Rooms must stand in floors, each importing
# only rooms below it: no loop of rooms (a loop is what makes some import run back up), and no loop of files inside
# a room either.
HOUSE = ("runtime", "codegen", "cli", "modelgen", "bench")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if parts[0] == "bench":
        return ".".join(parts)  # the bench scripts import each other as bench.*
    return ".".join(parts if parts[0] == "modelgen" else ["modelgen"] + parts)


def _file_graph() -> tuple[dict[str, Path], dict[str, set[str]]]:
    """Every module of the house and the modules it imports (function-level imports included), each import resolved
    to the deepest module it names: ``from . import ops`` is an arrow to ``ops``, not to the package's face."""
    modules = {_module_name(p): p for folder in HOUSE for p in sorted((REPO / folder).rglob("*.py"))}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = [n for _, n in _imports(path)]
        targets = set()
        for n in found:
            # `from pkg import x` yields both pkg and pkg.x: keep pkg only where x is no module of its own
            if any(other.startswith(n + ".") and other in modules for other in found):
                continue
            target = resolve(n)
            if target and target != name:
                targets.add(target)
        graph[name] = targets
    return modules, graph


def _room(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "bench":
        return "bench"
    if len(parts) < 3 or parts[1] != "runtime":
        # modelgen/__init__.py (the lazy public API, on top) and settings.py / targets.py (the ground) are rooms apart
        return parts[1] if len(parts) > 1 and parts[1] in ("codegen", "cli") else module
    return ".".join(parts[:3]) if (REPO / "runtime" / parts[2]).is_dir() else module


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative: the house is deep enough)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    loops.append(sorted(component))
    return loops


def _room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        room = rooms.setdefault(_room(module), set())
        room |= {_room(t) for t in targets if _room(t) != _room(module)}
    return rooms


def _why(graph: dict[str, set[str]], loop: list[str]) -> list[str]:
    return sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts if _room(m) in loop and _room(t) in loop
                  and _room(m) != _room(t))


def test_no_loop_of_rooms_so_no_import_runs_back_up():
    _, graph = _file_graph()
    loops = _loops(_room_graph(graph))
    assert loops == [], [(loop, _why(graph, loop)) for loop in loops]


def test_no_loop_of_files_inside_a_room():
    _, graph = _file_graph()
    assert _loops(graph) == []


def test_the_map_sees_a_loop_of_rooms_and_a_loop_of_files():
    # The two checks above can fail: an ops module importing distributed, which imports ops/gpu, is a loop of rooms;
    # two bench scripts importing each other a loop of files.
    graph = {"modelgen.runtime.ops.norm": {"modelgen.runtime.distributed"},
             "modelgen.runtime.distributed": {"modelgen.runtime.ops.gpu.allreduce"},
             "modelgen.runtime.ops.gpu.allreduce": set(),
             "bench.arch": {"bench.decode"}, "bench.decode": {"bench.arch"}}
    assert _loops(_room_graph(graph)) == [["modelgen.runtime.distributed", "modelgen.runtime.ops"]]
    assert ["bench.arch", "bench.decode"] in _loops(graph)
    modules, real = _file_graph()
    assert "modelgen.runtime.ops.gpu.allreduce" in real["modelgen.runtime.distributed"]  # the scan sees real arrows
    assert "bench.decode" in real["bench.arch"] and "modelgen.runtime.layers.moe.ops" in modules
