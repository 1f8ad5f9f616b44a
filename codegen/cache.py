"""The compile cache: what each spec renders to, keyed by everything that decides it.

``modelgen check`` / ``build`` / ``list`` and ``modelgen run``'s freshness check would otherwise parse, validate,
lower and render every spec (YAML parsing and the libcst check of each rendered file are most of that time). With
the cache, a spec that did not change costs a hash of its bytes; its files are compared by their SHA-256.

Key of a spec: SHA-256 of the compiler fingerprint and the spec's path and bytes. The fingerprint hashes the whole
compiler -- every ``codegen/**.py``, every file under the templates folder in use, ``runtime/targets/__init__.py``
(the target list) and the generator version -- so any compiler edit misses everything (correct, and rare). An entry
records the spec's ``extends:`` bases with the hash of their text; a base edited since is a miss (an entry keeps up to
``MAX_VARIANTS`` such states, so a base edited and reverted hits again). An entry holds no
generated text, only hashes: a hit can say "these files are up to date" but never produce them, so every caller
that needs text (a build that writes, a check that reports a diff) renders the spec as before.

Entries live in ``$MODELGEN_CACHE/compile/`` (default ``~/.cache/modelgen``), one JSON file per key, written
atomically; an unreadable or malformed entry is a miss. ``MODELGEN_COMPILE_CACHE=0`` turns the cache off.
Content-addressed keys mean entries never need invalidating; stale ones are simply never looked up again.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from modelgen import settings

from . import GENERATOR_VERSION
from .spec_file import display_path
from .yaml_source import read_regular

CODEGEN_DIR = Path(__file__).resolve().parent
REPO_ROOT = CODEGEN_DIR.parent
ENV_OFF = "MODELGEN_COMPILE_CACHE"
FORMAT = 1  # entry layout version


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def enabled() -> bool:
    return settings.get(ENV_OFF)


def cache_dir() -> Path:
    base = settings.get("MODELGEN_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "modelgen")
    return Path(base) / "compile"


@dataclass(frozen=True)
class Summary:
    """What the target indexes, ``modelgen list`` and the freshness check need of a spec, without compiling it."""

    spec_path: str  # display path, as in banners
    name: str
    architectures: tuple[str, ...]
    source_hash: str


@dataclass
class Entry:
    summary: Summary
    bases: dict[str, str] = field(default_factory=dict)  # extends: base display path -> sha256 of its text
    files: dict[str, dict[str, str]] = field(default_factory=dict)  # target -> {path under generated/: sha256}


def _tree_digest(h: "hashlib._Hash", root: Path, pattern: str) -> None:
    for p in sorted(root.rglob(pattern)):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(p.relative_to(root).as_posix().encode())
            h.update(b"\0")
            h.update(p.read_bytes())
            h.update(b"\0")


@functools.lru_cache(maxsize=8)
def _fingerprint(templates_dir: str, stamp: tuple) -> str:
    h = hashlib.sha256(f"modelgen {GENERATOR_VERSION} cache {FORMAT}\0".encode())
    _tree_digest(h, CODEGEN_DIR, "*.py")
    _tree_digest(h, Path(templates_dir), "*")
    h.update((REPO_ROOT / "runtime" / "targets" / "__init__.py").read_bytes())
    return h.hexdigest()


def _stamp(templates_dir: Path) -> tuple:
    """Modification times of the compiler's files: the fingerprint is recomputed when any of them changes (a test
    that edits a template in place, a developer saving a partial) and reused otherwise."""
    paths = [*CODEGEN_DIR.rglob("*.py"), *templates_dir.rglob("*")]
    return tuple(sorted((str(p), p.stat().st_mtime_ns) for p in paths if p.is_file()))


def fingerprint() -> str:
    from . import lower, render  # TEMPLATES_DIR is read at call time: tests point it at a copy

    dirs = sorted({str(lower.TEMPLATES_DIR), str(render.TEMPLATES_DIR)})  # the lowerer's and the renderer's
    return sha256("\0".join(_fingerprint(d, _stamp(Path(d))) for d in dirs))


def _key(spec: Path, display: str) -> str:
    return sha256(f"{fingerprint()}\0{display}\0".encode() + read_regular(spec))  # a FIFO must not block a lookup


def _read(path: Path) -> list[dict]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return list(raw["variants"]) if raw.get("format") == FORMAT else []
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _bases_unchanged(bases: Mapping[str, str]) -> bool:
    for name, digest in bases.items():  # a base spec edited since: this variant does not apply
        base = Path(name) if Path(name).is_absolute() else REPO_ROOT / name
        try:
            if sha256(read_regular(base).decode("utf-8")) != digest:
                return False
        except (OSError, UnicodeDecodeError):
            return False
    return True


def lookup(spec: Path, targets: Iterable[str] = ()) -> Entry | None:
    """The entry of ``spec`` as it is now (with file hashes for every target of ``targets``), or None."""
    if not enabled():
        return None
    display = display_path(spec)
    try:
        variants = _read(cache_dir() / f"{_key(spec, display)}.json")
    except OSError:
        return None
    for raw in variants:  # one per state of the bases (a base edited and reverted finds its old variant)
        try:
            entry = Entry(Summary(raw["spec_path"], raw["name"], tuple(raw["architectures"]), raw["source_hash"]),
                          dict(raw["bases"]), {t: dict(f) for t, f in raw["files"].items()})
        except (KeyError, TypeError, AttributeError):
            continue
        if entry.summary.spec_path == display and all(t in entry.files for t in targets) \
                and _bases_unchanged(entry.bases):
            return entry
    return None


MAX_VARIANTS = 4


def store(spec: Path, ir: Any, files_by_target: Mapping[str, Mapping[str, str]]) -> None:
    """Record what ``spec`` (compiled to ``ir``) rendered to, per target (merged with an entry of the same key).
    Never raises: a cache that cannot be written is only slower."""
    if not enabled():
        return
    try:
        display = display_path(spec)
        path = cache_dir() / f"{_key(spec, display)}.json"
        bases = dict(getattr(ir, "sources", ())[1:])
        variants = _read(path)
        same = next((v for v in variants if v.get("bases") == bases), None)
        files = dict(same["files"]) if same else {}
        files.update({t: {rel: sha256(text) for rel, text in f.items()} for t, f in files_by_target.items()})
        variant = {"spec_path": ir.spec_path, "name": ir.name, "architectures": list(ir.architectures),
                   "source_hash": ir.source_hash, "bases": bases, "files": files}
        variants = [variant] + [v for v in variants if v is not same][: MAX_VARIANTS - 1]
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".entry.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"format": FORMAT, "variants": variants}, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass
