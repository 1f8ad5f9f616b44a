"""Where every node of a loaded spec came from: file, line and column, keyed by the node's path of keys/indices.

A spec that ``extends:`` another is one merged document built from several files; each node keeps the position in the
file that *set* it (an inherited value points into the base spec, an overridden one into the child), so an error on
``("blocks", "decoder", "attention", "kind")`` names the right file and line.
"""
from __future__ import annotations

from typing import Any

from .errors import SpecIssue

Path_ = tuple[Any, ...]


def field_path(path: Path_) -> str:
    """``blocks.decoder.attention.kind``; a key that is empty or holds spaces/control characters is quoted
    (``config[' '].type``) so the ``file:line:col: field: message`` line stays unambiguous."""
    out = ""
    for part in path:
        text = str(part)
        if isinstance(part, str) and (not text or not text.isprintable() or any(c.isspace() for c in text)):
            out += f"[{text!r}]"
        else:
            out += ("." if out else "") + text
    return out


class SourceMap:
    """Positions (1-based line, col) and file of every node of a loaded (possibly merged) spec."""

    def __init__(self, file: str):
        self.file = file  # the spec that was loaded (the most derived one)
        self.positions: dict[Path_, tuple[int, int]] = {(): (1, 1)}
        self.key_positions: dict[Path_, tuple[int, int]] = {}
        self.files: dict[Path_, str] = {}  # only where it differs from ``self.file`` (inherited nodes)
        # (display name, text) of the spec and of every spec it extends, most derived first: the source hash of a
        # generated module covers them all, so editing a base spec marks its children stale.
        self.sources: list[tuple[str, str]] = []

    def _anchor(self, path: Path_) -> Path_:
        path = tuple(path)
        while path not in self.positions:
            path = path[:-1]
        return path

    def where(self, path: Path_) -> tuple[int, int]:
        """Position of ``path``, or of its nearest ancestor that has one."""
        return self.positions[self._anchor(path)]

    def file_of(self, path: Path_) -> str:
        """The file that set ``path`` (or its nearest located ancestor)."""
        return self.files.get(self._anchor(path), self.file)

    def issue(self, path: Path_, message: str, at_key: bool = False) -> SpecIssue:
        path = tuple(path)
        if at_key and path in self.key_positions:
            line, col = self.key_positions[path]
            file = self.files.get(path, self.file)
        else:
            anchor = self._anchor(path)
            line, col = self.positions[anchor]
            file = self.files.get(anchor, self.file)
        return SpecIssue(file, line, col, field_path(path), message)

    def source_text(self) -> str:
        """The text the source hash covers: the spec's own text, then each base's (named), most derived first.

        For a spec without ``extends`` this is exactly the file's text, so its hash does not change."""
        if not self.sources:
            return ""
        (_, own), *bases = self.sources
        return own + "".join(f"\n# --- extends {name}\n{text}" for name, text in bases)

    # -- used while merging (codegen/extends.py)
    def copy_node(self, src: "SourceMap", src_path: Path_, dst_path: Path_) -> None:
        """Copy the position entries of one node from ``src`` (file included)."""
        src_path, dst_path = tuple(src_path), tuple(dst_path)
        if src_path in src.positions:
            self.positions[dst_path] = src.positions[src_path]
            self._set_file(dst_path, src.files.get(src_path, src.file))
        if src_path in src.key_positions:
            self.key_positions[dst_path] = src.key_positions[src_path]

    def _set_file(self, path: Path_, file: str) -> None:
        if file == self.file:
            self.files.pop(path, None)
        else:
            self.files[path] = file
