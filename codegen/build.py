"""Build and check ``generated/``: deterministic, atomic, never partial.

``build`` renders everything first, in memory; only when every spec and template succeeded are files written, each
through a temporary file + ``os.replace``. A spec or template error therefore leaves ``generated/`` untouched.
``check`` renders in memory and compares *bytes* against the tree: stale, missing and extra files (of any kind; only
``__pycache__`` is ignored) each get a unified diff; a file that differs only in bytes a text diff hides (CRLF line
endings, a missing or extra final newline, trailing bytes, invalid UTF-8) says so in its header.
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
        ir = compile_spec(spec)  # includes the evaluation of every expression against a sample config
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
        if path.is_file() and not path.is_symlink() and path.read_bytes() == text.encode("utf-8"):
            continue
        _atomic_write(path, text)
        written.append(path)
    return written


def _tree(out_dir: Path) -> dict[str, bytes | None]:
    """Every file under ``out_dir`` (bytes), except ``__pycache__``; ``None`` for what is not a regular file."""
    files: dict[str, bytes | None] = {}
    if out_dir.exists():
        for p in sorted(out_dir.rglob("*")):
            rel = p.relative_to(out_dir)
            if "__pycache__" in rel.parts or (p.is_dir() and not p.is_symlink()):
                continue
            files[rel.as_posix()] = p.read_bytes() if p.is_file() and not p.is_symlink() else None
    return files


def _byte_note(want: bytes, have: bytes) -> str:
    """What a line diff does not show: why two files whose text may look the same differ."""
    notes = []
    if b"\r" in have and b"\r" not in want:
        notes.append("CRLF/CR line endings")
    if want.endswith(b"\n") != have.endswith(b"\n"):
        notes.append("final newline")
    try:
        have.decode("utf-8")
    except UnicodeDecodeError:
        notes.append("not valid UTF-8")
    if have.startswith(b"\xef\xbb\xbf"):
        notes.append("byte-order mark")
    return f" (bytes differ: {', '.join(notes)})" if notes else ""


def check(out_dir: Path = GENERATED_DIR) -> list[str]:
    """Unified diffs of every stale, missing or extra generated file (empty list = up to date)."""
    expected = {rel: text.encode("utf-8") for rel, text in render_all(all_specs(), TARGETS).items()}
    actual = _tree(out_dir)
    diffs = []
    for rel in sorted(set(expected) | set(actual)):
        want, have = expected.get(rel), actual.get(rel, b"")
        if rel in actual and have is not None and want == have:
            continue
        label = "generated/" + rel
        if rel not in actual:
            header = f"missing: {label}"
        elif have is None:
            header = f"not a regular file (a link, a device, ...): {label}"
        elif want is None:
            header = f"extra (no spec generates it): {label}"
        else:
            header = f"stale: {label}{_byte_note(want, have)}"
        diff = difflib.unified_diff(
            (have or b"").decode("utf-8", "replace").splitlines(keepends=True),
            (want or b"").decode("utf-8").splitlines(keepends=True),
            fromfile=f"a/{label}" if rel in actual else "/dev/null",
            tofile=f"b/{label}" if want is not None else "/dev/null",
        )
        diffs.append(header + "\n" + "".join(diff))
    return diffs
