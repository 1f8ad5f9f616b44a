"""Spec file -> schema-validated :class:`~modelgen.codegen.schema.Spec`, with the source map that locates its values.

Passes 1 and 2 of compilation (codegen/lower.py runs the third): YAML syntax and bounds (codegen/yaml_source.py),
then the schema, pydantic's errors mapped back to ``file:line:col`` with a did-you-mean for unknown keys. Its own
module so that lowering and build-time evaluation (codegen/evaluate.py) both load specs without importing each other.
"""
from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .errors import SpecError, SpecIssue
from .expr import short_repr
from .schema import Spec
from .yaml_source import SourceMap, load_yaml

REPO_ROOT = Path(__file__).resolve().parent.parent


def display_path(path: Path) -> str:
    """Repo-relative path for banners and error messages (absolute when outside the repo)."""
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------------------------------- schema error mapping
def _unwrap(tp: Any) -> list[Any]:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        out = []
        for a in typing.get_args(tp):
            out += _unwrap(a)
        return out
    return [tp]


def _tags(model: type[BaseModel]) -> tuple[Any, ...]:
    """The ``kind:`` literal(s) of a block-kind model (the discriminator pydantic puts in error locations)."""
    field_ = model.model_fields.get("kind")
    return typing.get_args(field_.annotation) if field_ is not None else ()


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that owns the last element of ``loc`` (for 'did you mean')."""
    current: list[Any] = [Spec]
    for part in loc[:-1]:
        # A discriminated union's tag (blocks.x.mlp.<kind>) first: keep the member it names -- a kind may also be a
        # field name of another member (the moe kind's `gated: bool` beside the `gated` kind).
        nxt: list[Any] = [tp for tp in current
                          if isinstance(tp, type) and issubclass(tp, BaseModel) and part in _tags(tp)]
        for tp in [] if nxt else current:
            if isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
                nxt += _unwrap(tp.model_fields[part].annotation)
            elif typing.get_origin(tp) is dict:
                nxt += _unwrap(typing.get_args(tp)[1])
            elif typing.get_origin(tp) is list:
                nxt += _unwrap(typing.get_args(tp)[0])
        current = nxt
    for tp in current:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return tp
    return None


def _data_path(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Drop the parts of a pydantic ``loc`` that are not in the data (union tags, validator names)."""
    path: list[Any] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
            path.append(part)
    return tuple(path)


def _schema_issues(err: ValidationError, data: Any, smap: SourceMap) -> list[SpecIssue]:
    issues = []
    seen = set()
    for e in err.errors():
        loc = tuple(e["loc"])
        path = _data_path(data, loc)
        if e["type"] == "extra_forbidden":
            model = _model_at(loc)
            key = loc[-1]
            msg = f"unknown key '{key}'"
            if model is not None:
                close = difflib.get_close_matches(str(key), list(model.model_fields), n=1)
                msg += f" (did you mean '{close[0]}'?)" if close else f"; allowed: {', '.join(model.model_fields)}"
            issue = smap.issue(path, msg, at_key=True)
        elif e["type"] == "missing":
            issue = smap.issue(path, f"missing required key '{loc[-1]}'")
            issue.field = ".".join(str(p) for p in path + (loc[-1],))
        elif e["type"] == "union_tag_invalid":
            # A kind no plug-in registers: point at the `kind:` value, as a single-kind literal error would.
            tag = e["ctx"]["discriminator"].strip("'")
            path = _data_path(data, loc + (tag,))
            issue = smap.issue(path, f"got {short_repr(e['ctx']['tag'])}; expected one of {e['ctx']['expected_tags']}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            if e["type"] == "literal_error":
                msg = f"got {short_repr(e.get('input'))}; {msg.lower()}"
            issue = smap.issue(path, msg)
        if str(issue) not in seen:
            seen.add(str(issue))
            issues.append(issue)
    return issues


def load_spec(path: str | Path) -> tuple[Spec, SourceMap, str]:
    """Parse + schema-validate a spec file; returns (spec, source map, raw text)."""
    path = Path(path)
    name = display_path(path)
    data, smap = load_yaml(path, name)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as err:
        raise SpecError(_schema_issues(err, data, smap)) from None
    return spec, smap, smap.sources[0][1]  # the text parsed: reading the path again could read something else
