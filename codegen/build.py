"""Build and check ``generated/``: deterministic, atomic, never partial.

``build`` renders everything first, in memory; only when every spec and template succeeded are files written, each
through a temporary file + ``os.replace``. A spec or template error therefore leaves ``generated/`` untouched.
``check`` renders in memory and diffs against the tree: stale, missing and extra files each get a unified diff.
"""
from __future__ import annotations

import difflib
import os
import tempfile
from pathlib import Path

from .lower import REPO_ROOT, SPECS_DIR, compile_spec
from .render import TARGETS, render_fixed, render_package

GENERATED_DIR = REPO_ROOT / "generated"


def all_specs() -> list[Path]:
    return sorted(SPECS_DIR.glob("*.yaml"))


def render_all(specs: list[Path], targets: tuple[str, ...]) -> dict[str, str]:
    files = render_fixed(TARGETS)
    for spec in specs:
        ir = compile_spec(spec)
        for target in targets:
            files.update(render_package(ir, target))
    return files


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build(specs: list[Path], targets: tuple[str, ...], out_dir: Path = GENERATED_DIR) -> list[Path]:
    """Render everything, then write the files that changed. Returns the paths written."""
    files = render_all(specs, targets)  # raises before anything is written
    written = []
    for rel, text in sorted(files.items()):
        path = out_dir / rel
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        _atomic_write(path, text)
        written.append(path)
    return written


def _tree(out_dir: Path) -> dict[str, str]:
    files = {}
    if out_dir.exists():
        for p in sorted(out_dir.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".md"):
                files[p.relative_to(out_dir).as_posix()] = p.read_text(encoding="utf-8")
    return files


def check(out_dir: Path = GENERATED_DIR) -> list[str]:
    """Unified diffs of every stale, missing or extra generated file (empty list = up to date)."""
    expected = render_all(all_specs(), TARGETS)
    actual = _tree(out_dir)
    diffs = []
    for rel in sorted(set(expected) | set(actual)):
        want, have = expected.get(rel), actual.get(rel)
        if want == have:
            continue
        label = "generated/" + rel
        if have is None:
            header = f"missing: {label}"
        elif want is None:
            header = f"extra (no spec generates it): {label}"
        else:
            header = f"stale: {label}"
        diff = difflib.unified_diff(
            (have or "").splitlines(keepends=True), (want or "").splitlines(keepends=True),
            fromfile=f"a/{label}" if have is not None else "/dev/null",
            tofile=f"b/{label}" if want is not None else "/dev/null",
        )
        diffs.append(header + "\n" + "".join(diff))
    return diffs
