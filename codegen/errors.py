"""Errors that point at a place in a spec file.

Every spec problem is reported as ``path/to/spec.yaml:LINE:COL: field.path: message`` so an editor can jump to it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SpecIssue:
    file: str
    line: int  # 1-based
    col: int  # 1-based
    field: str  # dotted path, e.g. "blocks.decoder.attention.kind"
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class SpecError(Exception):
    """One or more problems in a spec; ``str()`` lists them one per line."""

    def __init__(self, issues: list[SpecIssue]):
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


class CodegenError(Exception):
    """A bug in a template or the generator (not in the user's spec); names the template."""
