"""Build and check ``generated/``: deterministic, atomic, never partial.

``build`` renders everything first, in memory; only when every spec and template succeeded are files written, each
through a temporary file + ``os.replace``. A spec or template error therefore leaves ``generated/`` untouched --
unless the caller asks to keep going (``modelgen build``: ``keep_going=True``): then each spec is rendered on its
own, the ones that build are written, a broken spec's files (and the target indexes, which need every spec) are left
as they were, and :class:`BrokenSpecs` names each broken spec with its error.
``check`` renders in memory and compares *bytes* against the tree: stale, missing and extra files (of any kind; only
``__pycache__`` is ignored) each get a unified diff; a file that differs only in bytes a text diff hides (CRLF line
endings, a missing or extra final newline, trailing bytes, invalid UTF-8) says so in its header.
"""
from __future__ import annotations

import ast
import difflib
import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from . import cache
from .errors import ModelgenError, SpecError
from .lower import SPECS_DIR, compile_spec
from .spec_file import REPO_ROOT, display_path, load_spec
from .render import TARGETS, render_fixed, render_package
from .yaml_source import read_regular

GENERATED_DIR = REPO_ROOT / "generated"


def all_specs() -> list[Path]:
    return sorted(SPECS_DIR.glob("*.yaml"))


def _in_specs_dir(spec: Path) -> bool:
    return spec.resolve().parent == SPECS_DIR.resolve()


def _name_taken(spec: Path, name: str, why: str) -> SpecError:
    _, smap, _ = load_spec(spec)
    return SpecError([smap.issue(("name",), f"'{name}' {why}", at_key=False)])


def check_package_owner(spec: Path, name: str) -> None:
    """The package ``generated/<target>/<name>`` belongs to ``specs/<name>.yaml``: a committed spec must be named
    after its file, so no two of specs/ can generate (and the target index serve) one package."""
    if _in_specs_dir(spec) and spec.stem != name:
        raise _name_taken(spec, name, f"is not this file's name; a spec in specs/ is named after its file "
                                      f"({spec.stem}), so that its package cannot replace another's")


def check_out_of_tree_name(spec: Path) -> None:
    """A spec outside specs/ built into generated/ must not take a committed spec's package name: its package
    would silently replace that model's (``run`` would load it for the committed architectures)."""
    if _in_specs_dir(spec):
        return
    try:
        loaded, _, _ = load_spec(spec)
    except ModelgenError:
        return  # rendering reports it, located
    owner = SPECS_DIR / f"{loaded.name}.yaml"
    if owner.is_file():
        raise _name_taken(spec, loaded.name, f"belongs to {display_path(owner)}; building this spec into "
                                             "generated/ would replace that model's package: give it another name")


def render_spec(spec: Path, targets: tuple[str, ...]) -> tuple[Any, dict[str, str]]:
    """(IR, files) of one spec on ``targets``; records the files' hashes in the compile cache."""
    ir = compile_spec(spec)  # includes the evaluation of every expression against a sample config
    check_package_owner(spec, ir.name)
    by_target = {target: render_package(ir, target) for target in targets}
    cache.store(spec, ir, by_target)
    return ir, {rel: text for files in by_target.values() for rel, text in files.items()}


def summaries(specs: list[Path], known: dict[Path, Any] | None = None) -> list[Any]:
    """What the target indexes need of each spec (name, architectures, path): ``known`` IRs, else the compile
    cache's summary, else a compile."""
    known = known or {}
    out = []
    for spec in specs:
        if spec in known:
            out.append(known[spec])
            continue
        entry = cache.lookup(spec)
        out.append(entry.summary if entry is not None else compile_spec(spec))
    return out


def render_all(specs: list[Path], targets: tuple[str, ...]) -> dict[str, str]:
    files: dict[str, str] = {}
    irs = {}
    for spec in specs:
        irs[spec], out = render_spec(spec, targets)
        files.update(out)
    files.update(render_fixed(TARGETS, summaries(all_specs(), irs)))
    return files


class BrokenSpecs(ModelgenError):
    """Some specs do not build; the others were handled. ``broken``: spec path -> its error; ``written``: files
    written for the others (build) or their diffs (check)."""

    def __init__(self, broken: dict[Path, ModelgenError], written: list | None = None):
        self.broken, self.written = broken, written or []
        super().__init__("\n".join(f"{display_path(p)}: does not build:\n{e}" for p, e in broken.items()))


def _previous_entries(out_dir: Path, packages: set[str]) -> dict[str, str]:
    """Architecture -> package of the index entries on disk (any target's ``__init__.py``) that name one of
    ``packages``. The index is generated literal data (``MODELS = {...}``), read with ``ast.literal_eval``."""
    out: dict[str, str] = {}
    for target in TARGETS:
        try:
            tree = ast.parse(read_regular(out_dir / target / "__init__.py").decode("utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue  # no index yet, or one damaged by hand: nothing to carry over
        for node in tree.body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["MODELS"]:
                try:
                    models = ast.literal_eval(node.value)
                except ValueError:
                    continue
                out.update({a: p for a, p in models.items() if isinstance(a, str) and p in packages})
    return out


def _carried_over(broken: dict[Path, ModelgenError], built: list[Any], out_dir: Path) -> list[cache.Summary]:
    """Index entries of the broken specs as they are on disk (their packages are left as they were, so they keep
    serving what they served), unless a spec that builds now claims the architecture."""
    claimed = {a for ir in built for a in ir.architectures}
    packages = {d.split("/", 1)[1] for spec in broken for d in package_dirs(spec)}
    by_package: dict[str, list[str]] = {}
    for arch, package in sorted(_previous_entries(out_dir, packages).items()):
        if arch not in claimed:
            by_package.setdefault(package, []).append(arch)
    return [cache.Summary(f"generated/{package}", package, tuple(archs), "") for package, archs in by_package.items()]


def render_each(specs: list[Path], targets: tuple[str, ...],
                out_dir: Path = GENERATED_DIR) -> tuple[dict[str, str], dict[Path, ModelgenError]]:
    """Like :func:`render_all`, but one spec at a time: the files of every spec that builds, and the error of each
    that does not. The target indexes (``<target>/__init__.py``) list every spec in specs/: those that build, and
    for a broken one its entries as they are in ``out_dir``'s index (its package is left as it was), so a broken
    spec neither blocks another's index entry nor loses its own."""
    files: dict[str, str] = {}
    broken: dict[Path, ModelgenError] = {}
    irs = {}
    seen: set[Path] = set()
    for spec in [*specs, *all_specs()]:  # every spec of specs/ too: the indexes need them
        if spec.resolve() in seen:  # specs/x.yaml given on the command line is also one of all_specs()
            continue
        seen.add(spec.resolve())
        try:
            if spec in specs:
                irs[spec], out = render_spec(spec, targets)
                files.update(out)
            else:
                irs[spec] = summaries([spec])[0]
        except ModelgenError as e:
            broken[spec] = e
    in_specs_dir = {s: e for s, e in broken.items() if _in_specs_dir(s)}
    built = [ir for spec, ir in irs.items() if _in_specs_dir(spec)]
    files.update(render_fixed(TARGETS, built + _carried_over(in_specs_dir, built, out_dir)))
    return files, broken


def broken_specs() -> list[str]:
    """Display paths of the specs in specs/ that do not build (the compile cache answers for those it knows): what
    a "no generated model" error names, since a broken spec is one reason its model is missing from the index."""
    out = []
    for spec in all_specs():
        try:
            summaries([spec])
        except ModelgenError:
            out.append(display_path(spec))
    return out


def package_dirs(spec: Path) -> set[str]:
    """Folders (relative to generated/) a spec's packages live in: ``<target>/<name>`` for its ``name:`` when the
    file still parses far enough to tell, and for its file stem (the convention) in any case."""
    names = {spec.stem}
    try:
        text = read_regular(spec).decode("utf-8", "replace")  # a FIFO or device named as a spec must not block
        m = re.search(r"^name:\s*([a-z][a-z0-9_]*)\s*$", text, re.MULTILINE)
        if m:
            names.add(m.group(1))
    except OSError:
        pass
    return {f"{t}/{n}" for t in TARGETS for n in names}


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


def _fresh_on_disk(entry: cache.Entry | None, targets: tuple[str, ...], read) -> bool:
    """The compile cache knows the spec as it is now and every file it renders on ``targets`` has the recorded hash
    on disk (``read(rel)``: the file's bytes, None when it is missing or not a regular file)."""
    if entry is None:
        return False
    for target in targets:
        for rel, digest in entry.files[target].items():
            data = read(rel)
            if data is None or hashlib.sha256(data).hexdigest() != digest:
                return False
    return True


def _file_reader(out_dir: Path):
    def read(rel: str) -> bytes | None:
        path = out_dir / rel
        return path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return read


def build(specs: list[Path], targets: tuple[str, ...], out_dir: Path = GENERATED_DIR,
          keep_going: bool = False) -> list[Path]:
    """Render everything, then write the files that changed. Returns the paths written.

    ``keep_going``: when some specs do not build, write the files of the others, then raise :class:`BrokenSpecs`
    (its ``written`` lists what was written); otherwise the first error is raised before anything is written.
    Specs the compile cache knows, whose files on disk have the recorded hashes, are not rendered again."""
    if out_dir.resolve() == GENERATED_DIR.resolve():
        for spec in specs:
            check_out_of_tree_name(spec)
    read = _file_reader(out_dir)
    specs = [s for s in specs if not _fresh_on_disk(cache.lookup(s, targets), targets, read)]
    broken: dict[Path, ModelgenError] = {}
    try:
        files = render_all(specs, targets)  # raises before anything is written
    except ModelgenError:
        if not keep_going:
            raise
        files, broken = render_each(specs, targets, out_dir)
    written = _write(files, out_dir)
    if broken:
        raise BrokenSpecs(broken, written)
    return written


def _write(files: dict[str, str], out_dir: Path) -> list[Path]:
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
    """Unified diffs of every stale, missing or extra generated file (empty list = up to date).

    A spec that does not build is one entry (``broken: specs/x.yaml: ...`` with its errors); the others are still
    compared, while the broken spec's own packages and the package markers and target indexes (rendered with every
    spec) are not."""
    actual = _tree(out_dir)
    # Specs the compile cache knows as they are now, whose files all have the recorded hashes: equal, not rendered.
    fresh = {}
    for spec in all_specs():
        entry = cache.lookup(spec, TARGETS)
        if _fresh_on_disk(entry, TARGETS, actual.get):
            fresh[spec] = entry
    equal = {rel for e in fresh.values() for t in TARGETS for rel in e.files[t]}
    diffs = []
    stale_specs = [s for s in all_specs() if s not in fresh]
    try:
        rendered = render_all(stale_specs, TARGETS)  # the package markers and indexes always
    except ModelgenError:
        rendered, broken = render_each(stale_specs, TARGETS, out_dir)
        for spec, err in broken.items():
            diffs.append(f"broken: {display_path(spec)}: does not build; its generated files were not checked:\n{err}")
    expected = {rel: text.encode("utf-8") for rel, text in rendered.items()}
    expected.update({rel: None for rel in equal if rel not in expected})  # placeholders: known equal
    if diffs:  # skip what could not be rendered: the broken specs' packages and the indexes
        skipped = set().union(*(package_dirs(s) for s in broken)) | {"__init__.py"} | {f"{t}/__init__.py" for t in TARGETS}
        actual = {rel: data for rel, data in actual.items()
                  if rel not in skipped and not any(rel.startswith(d + "/") for d in skipped)}
        expected = {rel: data for rel, data in expected.items() if rel not in skipped}
    for rel in sorted(set(expected) | set(actual)):
        want, have = expected.get(rel), actual.get(rel, b"")
        if rel in equal or (rel in actual and have is not None and want == have):
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
