"""The only ways a spec-derived string reaches generated Python source.

``pylit``           a Python literal (str, int, float, bool, None, and tuples/lists/dicts of them), ``repr``-exact:
                    every character that is not printable (newlines, U+2028/U+2029, ...) is an escape, so the
                    literal stays on one line and ``str.splitlines`` in the output normaliser cannot split it;
``docstring_text``  text safe inside a triple-quoted docstring (backslashes, quotes, non-printables escaped);
``comment_text``    text safe after ``#`` (non-printables escaped, so a comment cannot end its line).
Templates use them through the ``lit``, ``doc`` and ``comment`` filters of codegen/render.py.

``spec_literal`` is ``pylit`` for documentation: the same value, but the characters Markdown or HTML would read
(a backtick ends a code span, ``|`` a table cell, ``<``/``>``/``&`` start markup) written as ``\\xNN`` escapes, so a
value's spec text (``Value.spec``, READMEs) stays inside the code span a template puts it in.
"""
from __future__ import annotations

from typing import Any


def _string(s: str) -> str:
    r = repr(s)
    # Double quotes, as the rest of the generated code, when that needs no escaping (repr picks single quotes).
    if r[0] == "'" and "'" not in s and '"' not in s:
        r = '"' + r[1:-1] + '"'
    return r


def pylit(value: Any) -> str:
    if isinstance(value, str):
        return _string(value)
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, tuple):
        items = [pylit(v) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(pylit(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{pylit(k)}: {pylit(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no Python literal for {type(value).__name__}")


_MARKUP = {c: f"\\x{ord(c):02x}" for c in "`|<>&"}


def markup_escaped(string_literal: str) -> str:
    """A Python string literal with markup characters escaped: still a literal of the same value (none of them is
    part of an escape sequence, so replacing them inside the quotes is exact)."""
    return string_literal.translate(str.maketrans(_MARKUP))


def spec_literal(value: Any) -> str:
    """``pylit(value)``, markup-escaped when it is a string."""
    return markup_escaped(pylit(value)) if isinstance(value, str) else pylit(value)


def _escaped(ch: str) -> str:
    return repr(ch)[1:-1] if not ch.isprintable() else ch


def docstring_text(text: str) -> str:
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')  # no run of quotes can close the docstring
        else:
            out.append(_escaped(ch))
    return "".join(out)


def comment_text(text: str) -> str:
    return "".join(_escaped(ch) for ch in text)
