"""Load a spec with ruamel.yaml, keeping the line/column of every key and value.

The loaded data is converted to plain dicts/lists (what pydantic validates); positions are kept in a side table keyed
by the path of keys/indices, so a validation error on ``("blocks", "decoder", "attention", "kind")`` can be reported at
the exact place in the file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from .errors import SpecError, SpecIssue

Path_ = tuple[Any, ...]


class SourceMap:
    """Positions (1-based line, col) of every node of a loaded YAML document."""

    def __init__(self, file: str):
        self.file = file
        self.positions: dict[Path_, tuple[int, int]] = {(): (1, 1)}
        self.key_positions: dict[Path_, tuple[int, int]] = {}

    def where(self, path: Path_) -> tuple[int, int]:
        """Position of ``path``, or of its nearest ancestor that has one."""
        path = tuple(path)
        while path not in self.positions:
            path = path[:-1]
        return self.positions[path]

    def issue(self, path: Path_, message: str, at_key: bool = False) -> SpecIssue:
        path = tuple(path)
        line, col = self.key_positions[path] if at_key and path in self.key_positions else self.where(path)
        field = ".".join(str(p) for p in path)
        return SpecIssue(self.file, line, col, field, message)


def _plain(node: Any, path: Path_, smap: SourceMap) -> Any:
    if isinstance(node, CommentedMap):
        out = {}
        for key, value in node.items():
            # Point at the value (where a wrong type or bad enum sits); a missing value falls back to the key.
            line, col = node.lc.value(key) if key in node.lc.data else (node.lc.line, node.lc.col)
            smap.positions[path + (key,)] = (line + 1, col + 1)
            if key in node.lc.data:
                kline, kcol = node.lc.key(key)
                smap.key_positions[path + (key,)] = (kline + 1, kcol + 1)
            out[key] = _plain(value, path + (key,), smap)
        return out
    if isinstance(node, CommentedSeq):
        out_list = []
        for i, value in enumerate(node):
            if i in node.lc.data:
                line, col = node.lc.item(i)
                smap.positions[path + (i,)] = (line + 1, col + 1)
            out_list.append(_plain(value, path + (i,), smap))
        return out_list
    return node


def load_yaml(path: str | Path, display_name: str | None = None) -> tuple[Any, SourceMap]:
    """Parse ``path``; return (plain data, source map). YAML syntax errors become SpecError with position."""
    path = Path(path)
    name = display_name or str(path)
    smap = SourceMap(name)
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError([SpecIssue(name, 1, 1, "", f"cannot read spec: {e.strerror}")]) from None
    try:
        doc = yaml.load(text)
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise SpecError([SpecIssue(name, line, col, "", f"YAML syntax error: {e.problem or e}")]) from None
    except Exception as e:  # ruamel raises a few non-marked errors (e.g. duplicate keys in some versions)
        raise SpecError([SpecIssue(name, 1, 1, "", f"YAML error: {e}")]) from None
    if not isinstance(doc, CommentedMap):
        raise SpecError([SpecIssue(name, 1, 1, "", "a spec must be a YAML mapping at the top level")])
    return _plain(doc, (), smap), smap
