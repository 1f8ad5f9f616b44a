"""Load a spec with ruamel.yaml, keeping the file, line and column of every key and value; bounded; with ``extends:``.

The loaded data is converted to plain dicts/lists (what pydantic validates); positions are kept in a side table keyed
by the path of keys/indices (:class:`~modelgen.codegen.source_map.SourceMap`), so a validation error on
``("blocks", "decoder", "attention", "kind")`` can be reported at the exact place in the file that set it.

Specs are untrusted input (a pull request can add one), so parsing is bounded *before* anything is constructed:
  * only a regular file is read (:func:`read_regular`: a FIFO, device or directory is refused without blocking on it);
  * the file is at most :data:`MAX_SPEC_BYTES` and valid UTF-8;
  * one pass over the YAML *events* (no objects built yet) refuses explicit tags (``!foo``, ``!!python/object``: only
    ``!remove`` and ``!replace`` below exist), collection keys, nesting deeper than :data:`MAX_DEPTH`, more than
    :data:`MAX_ALIASES` alias uses, and documents whose alias-expanded size passes :data:`MAX_NODES` (the "billion
    laughs" bomb is refused at the alias that crosses the limit, having allocated nothing);
  * only then does ruamel's round-trip loader build the document, which without tags yields only mappings, sequences
    and scalars.
Every refusal is a located :class:`SpecError`.

Inheritance (``extends:``) is resolved here, so the rest of the compiler sees one plain document; the merge rules are
in :mod:`modelgen.codegen.extends`.
"""
from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.events import (
    AliasEvent, CollectionEndEvent, CollectionStartEvent, MappingStartEvent, NodeEvent, ScalarEvent,
)
from ruamel.yaml.reader import ReaderError

from .errors import SpecError, SpecIssue
from .extends import MAX_EXTENDS_DEPTH, REMOVE, REMOVE_TAG, REPLACE_TAG, resolve_extends
from .source_map import Path_, SourceMap

__all__ = ["SourceMap", "load_yaml", "read_regular", "MAX_SPEC_BYTES", "MAX_DEPTH", "MAX_ALIASES", "MAX_NODES"]

MAX_SPEC_BYTES = 256 * 1024  # the largest spec today is ~4 KiB
MAX_DEPTH = 32  # nested mappings/lists; a spec needs ~6
MAX_ALIASES = 256  # alias uses (*name) in one file
MAX_NODES = 50_000  # scalars + collections after alias expansion (and after extends); a spec has ~600


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _fail(file: str, line: int, col: int, message: str, field: str = "") -> SpecError:
    return SpecError([SpecIssue(file, line, col, field, _one_line(message))])


def _line_col(data: str | bytes, offset: int) -> tuple[int, int]:
    """1-based line/col of ``offset`` in ``data`` (a byte offset for bytes: col counts decoded characters)."""
    nl = "\n" if isinstance(data, str) else b"\n"
    start = data.rfind(nl, 0, offset) + 1  # type: ignore[arg-type]
    line = data.count(nl, 0, offset) + 1  # type: ignore[arg-type]
    prefix = data[start:offset]
    col = len(prefix.decode("utf-8", "replace") if isinstance(prefix, bytes) else prefix) + 1
    return line, col


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_regular(path: Path, limit: int = MAX_SPEC_BYTES) -> bytes:
    """At most ``limit + 1`` bytes of ``path``; OSError unless it is a regular file (symlinks followed).

    Opened non-blocking, then checked with ``fstat`` on the open descriptor: opening a FIFO blocks until a writer
    comes, and reading ``/dev/zero`` never ends, so the kind is decided before any read and cannot change between a
    check and the open."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
            raise OSError(f"{kind}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        return f.read(limit + 1)


def _read(path: Path, name: str) -> str:
    try:
        raw = read_regular(path)
    except OSError as e:
        raise _fail(name, 1, 1, f"cannot read spec: {e.strerror or e}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise _fail(name, 1, 1, f"spec is larger than {MAX_SPEC_BYTES // 1024} KiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line, col = _line_col(raw, e.start)
        raise _fail(name, line, col, f"spec is not valid UTF-8 text (byte 0x{raw[e.start]:02x})") from None


def _tag_name(tag: Any) -> str | None:
    value = getattr(tag, "value", tag)  # ruamel >= 0.18 wraps tags in a Tag object
    return None if value is None else str(value)


def _scan(yaml: YAML, text: str, name: str) -> None:
    """Enforce the limits on the event stream, before ruamel composes or constructs anything."""
    stack: list[list[Any]] = []
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (expanded node count, height), once its node has ended
    defined: dict[str, int] = {}  # anchor -> line of its definition
    total = 0
    aliases = 0

    for ev in yaml.parse(text):
        if not isinstance(ev, (NodeEvent, CollectionEndEvent)):
            continue
        mark = ev.start_mark
        where = (mark.line + 1, mark.column + 1)
        if isinstance(ev, CollectionEndEvent):
            _, _, size, height, anchor = stack.pop()
            if anchor is not None:
                anchors[anchor] = (size, height)
            if stack:
                stack[-1][2] += size
                stack[-1][3] = max(stack[-1][3], height + 1)
            continue
        is_key = bool(stack) and stack[-1][0] and stack[-1][1] % 2 == 0
        if stack:
            stack[-1][1] += 1
        tag = _tag_name(getattr(ev, "tag", None))
        if tag is not None:
            allowed = (tag == REMOVE_TAG and isinstance(ev, ScalarEvent) and ev.value in ("", "~", "null")) or (
                tag == REPLACE_TAG and isinstance(ev, MappingStartEvent)
            )
            if not allowed or is_key:
                raise _fail(name, *where, f"YAML tag '{tag}' is not allowed; specs are plain data (the only tags "
                            f"are '{REMOVE_TAG}' with no value and '{REPLACE_TAG}' on a mapping, in a spec that "
                            "extends another)")
        if is_key and not isinstance(ev, ScalarEvent):
            raise _fail(name, *where, "mapping keys must be plain scalars, not lists, mappings or aliases")
        anchor = getattr(ev, "anchor", None) if not isinstance(ev, AliasEvent) else None
        if anchor is not None:
            if anchor in defined:
                raise _fail(name, *where, f"anchor &{anchor} is defined twice (first at line {defined[anchor]}); "
                            "give each anchor its own name")
            defined[anchor] = where[0]
        if isinstance(ev, CollectionStartEvent):
            if len(stack) + 1 > MAX_DEPTH:
                raise _fail(name, *where, f"mappings/lists nested deeper than {MAX_DEPTH} levels")
            # [is mapping, children so far, expanded size, height (levels of nesting it holds), anchor]
            stack.append([isinstance(ev, MappingStartEvent), 0, 1, 1, ev.anchor])
            size = 1
        elif isinstance(ev, AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise _fail(name, *where, f"more than {MAX_ALIASES} alias uses (*name)")
            if ev.anchor not in anchors:
                open_ = any(frame[4] == ev.anchor for frame in stack)
                problem = "refers to a collection that contains it (recursive alias)" if open_ else (
                    "has no anchor before it")
                raise _fail(name, *where, f"alias *{ev.anchor} {problem}")
            size, height = anchors[ev.anchor]
            if len(stack) + height > MAX_DEPTH:
                raise _fail(name, *where, f"alias *{ev.anchor} nests deeper than {MAX_DEPTH} levels when expanded")
            if stack:
                stack[-1][2] += size
                stack[-1][3] = max(stack[-1][3], height + 1)
        else:  # scalar
            size = 1
            if ev.anchor is not None:
                anchors[ev.anchor] = (1, 0)
            if stack:
                stack[-1][2] += 1
        total += size
        if total > MAX_NODES:
            raise _fail(name, *where, f"spec expands to more than {MAX_NODES} values (alias expansion)")


def _plain(node: Any, path: Path_, smap: SourceMap, replace: set[Path_]) -> Any:
    if isinstance(node, CommentedMap):
        if getattr(node, "merge", None):  # `<<: *anchor`: keys with no position of their own; extends does this job
            line, col = node.lc.line + 1, node.lc.col + 1
            raise _fail(smap.file, line, col, "YAML merge keys (<<) are not allowed in specs; use an alias of the "
                        "whole value, or `extends:` with `!remove`/`!replace`", ".".join(map(str, path)))
        if _tag_name(getattr(node, "tag", None)) == REPLACE_TAG:
            replace.add(path)
        out = {}
        for key, value in node.items():
            # Point at the value (where a wrong type or bad enum sits); a missing value falls back to the key.
            line, col = node.lc.value(key) if key in node.lc.data else (node.lc.line, node.lc.col)
            smap.positions[path + (key,)] = (line + 1, col + 1)
            if key in node.lc.data:
                kline, kcol = node.lc.key(key)
                smap.key_positions[path + (key,)] = (kline + 1, kcol + 1)
            out[key] = _plain(value, path + (key,), smap, replace)
        return out
    if isinstance(node, CommentedSeq):
        out_list = []
        for i, value in enumerate(node):
            if i in node.lc.data:
                line, col = node.lc.item(i)
                smap.positions[path + (i,)] = (line + 1, col + 1)
            out_list.append(_plain(value, path + (i,), smap, replace))
        return out_list
    if isinstance(node, TaggedScalar):  # only !remove gets past _scan
        return REMOVE
    return node


def _load_one(path: Path, name: str) -> tuple[dict[str, Any], SourceMap, set[Path_]]:
    """One file: (plain data, its source map, the paths of mappings tagged !replace); !remove values are REMOVE."""
    text = _read(path, name)
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        _scan(yaml, text, name)
        doc = yaml.load(text)
    except SpecError:
        raise
    except ReaderError as e:  # control characters: ruamel's reader refuses them
        line, col = _line_col(text, e.position)
        raise _fail(name, line, col, f"character {e.character!r} is not allowed in YAML") from None
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise _fail(name, line, col, f"YAML syntax error: {e.problem or e}") from None
    except Exception as e:  # noqa: BLE001 - ruamel raises a few unmarked errors; they must still be one located line
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise _fail(name, line, col, f"YAML error: {type(e).__name__}: {getattr(e, 'problem', None) or e}") from None
    if not isinstance(doc, CommentedMap):
        raise _fail(name, 1, 1, "a spec must be a YAML mapping at the top level")
    smap = SourceMap(name)
    smap.sources.append((name, text))
    replace: set[Path_] = set()
    data = _plain(doc, (), smap, replace)
    return data, smap, replace


def load_yaml(path: str | Path, display_name: str | None = None) -> tuple[Any, SourceMap]:
    """Parse ``path`` and whatever it ``extends:``; return (plain merged data, source map).

    Problems (syntax, limits, tags, bad ``extends``) become a :class:`SpecError` naming file, line and column."""
    path = Path(path)
    root = path.resolve().parent  # bases must live in the spec's directory (or below it)
    return _load_chain(path, display_name or str(path), root, ())


def _load_chain(path: Path, name: str, root: Path, chain: tuple[Path, ...]) -> tuple[Any, SourceMap]:
    data, smap, replace = _load_one(path, name)
    if "extends" not in data:
        return resolve_extends(None, None, data, smap, replace, max_nodes=MAX_NODES)
    ext = data["extends"]
    where = smap.where(("extends",))
    if not isinstance(ext, str) or not ext.strip():
        raise _fail(name, *where, "expected a relative path to the base spec, e.g. llama.yaml", "extends")
    parts = ext.replace("\\", "/").split("/")
    if ext.startswith(("/", "\\", "~")) or ":" in parts[0] or ".." in parts or not ext.endswith((".yaml", ".yml")):
        raise _fail(name, *where, f"'{ext}' must be a relative path to a .yaml spec beside this one "
                    "(no absolute paths, no '..')", "extends")
    base = (path.parent / ext).resolve()
    if not base.is_relative_to(root):
        raise _fail(name, *where, f"'{ext}' resolves outside the spec directory {root}", "extends")
    if base in chain or base == path.resolve():
        cycle = " -> ".join([p.name for p in chain] + [path.name, base.name])
        raise _fail(name, *where, f"circular extends: {cycle}", "extends")
    if len(chain) + 1 >= MAX_EXTENDS_DEPTH:
        raise _fail(name, *where, f"extends chain longer than {MAX_EXTENDS_DEPTH} specs", "extends")
    if not base.is_file():
        raise _fail(name, *where, f"base spec '{ext}' not found", "extends")
    base_name = posixpath.normpath(posixpath.join(posixpath.dirname(name.replace("\\", "/")), ext.replace("\\", "/")))
    base_data, base_smap = _load_chain(base, base_name, root, chain + (path.resolve(),))
    return resolve_extends(base_data, base_smap, data, smap, replace, max_nodes=MAX_NODES)
