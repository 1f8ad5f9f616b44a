"""Errors that point at a place in a spec file.

Every spec problem is reported as ``path/to/spec.yaml:LINE:COL: field.path: message`` so an editor can jump to it.
Everything the compiler raises on purpose derives from :class:`ModelgenError`; any other exception out of
``modelgen build``/``check`` is a bug (tests/test_fuzz_specs.py holds the pipeline to that).
"""
from __future__ import annotations

from dataclasses import dataclass

# Every character str.splitlines() breaks on: an issue must stay on one line whatever a key or value holds.
_LINE_BREAKS = {c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


MAX_MESSAGE = 1000  # characters of one issue's message: values quoted in it are shortened where they are quoted
#                     (codegen/expr.py short_repr); this is the last guard, so no message can grow with its input


def one_line(text: str) -> str:
    return text.translate(str.maketrans(_LINE_BREAKS)) if any(c in text for c in _LINE_BREAKS) else text


def shorten(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass
class SpecIssue:
    file: str
    line: int  # 1-based
    col: int  # 1-based
    field: str  # dotted path, e.g. "blocks.decoder.attention.kind"
    message: str

    def __str__(self) -> str:
        where = f"{one_line(self.file)}:{self.line}:{self.col}"
        message = one_line(shorten(self.message))
        return f"{where}: {one_line(self.field)}: {message}" if self.field else f"{where}: {message}"


class ModelgenError(Exception):
    """Base of the compiler's own errors: their ``str()`` is the complete, user-facing message."""


class SpecError(ModelgenError):
    """One or more problems in a spec; ``str()`` lists them one per line."""

    def __init__(self, issues: list[SpecIssue]):
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


class CodegenError(ModelgenError):
    """A bug in a template or the generator (not in the user's spec); names the template."""
