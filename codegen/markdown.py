"""The only ways spec text reaches a generated README (templates/common/README.md.j2): escaped for Markdown and HTML.

A spec is untrusted, and a README is rendered by GitHub and editors: a description holding ``<img src=x
onerror=...>``, ``[click](javascript:...)``, a ``|`` that splits a table row or a backtick that ends a code span
must show as the characters it is. Four filters (codegen/render.py registers them):
  ``md_text``     free text in a paragraph: one line, HTML's ``& < >`` as entities, Markdown's inline markup
                  characters backslash-escaped (``_`` only at a word edge, where it can start emphasis), and a
                  leading character that would open a block (heading, list, quote, rule) escaped;
  ``md_code``     a code span around any text: a backtick fence longer than any run inside it; ``cell=True``
                  escapes ``|`` too, which GitHub reads as a column break even inside a code span in a table;
  ``md_comment``  text inside ``<!-- ... -->``: no ``--`` and no ``>`` can end the comment early;
  ``md_url``      a relative link target, percent-encoded.
Expression text (``Value.spec``) needs none of them: string constants in it are written with markup characters as
``\\xNN`` escapes (codegen/literal.py ``markup_escaped``), so it stays inside the backticks a block kind's
``readme_rows`` puts around it.
"""
from __future__ import annotations

import re
from urllib.parse import quote

from .errors import one_line

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_INLINE = set("\\`*[]~|!")  # `!` only matters before `[`, `(`/`)` only after `]`: escaping `[ ]` covers links
_BLOCK_START = re.compile(r"^(#|[-+=]|\d+[.)])")


def md_text(text: str) -> str:
    text = " ".join(one_line(str(text)).split())
    out = []
    for i, ch in enumerate(text):
        if ch in _ENTITIES:
            out.append(_ENTITIES[ch])
        elif ch in _INLINE:
            out.append("\\" + ch)
        elif ch == "_" and not (0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()):
            out.append("\\_")
        else:
            out.append(ch)
    escaped = "".join(out)
    m = _BLOCK_START.match(escaped)
    return escaped[:m.end() - 1] + "\\" + escaped[m.end() - 1:] if m else escaped


def md_code(text: str, cell: bool = False) -> str:
    text = one_line(str(text))
    if cell:
        text = text.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_comment(text: str) -> str:
    text = one_line(str(text))
    while "--" in text:
        text = text.replace("--", "-~-")
    return text.replace(">", "&gt;")


def md_url(path: str) -> str:
    return quote(one_line(str(path)), safe="/._-~")
