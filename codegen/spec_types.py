"""Value types of the spec language, shared by codegen/schema.py and the block kinds (codegen/blocks/).

Generated code is safe by construction because every spec string is one of three kinds, checked here at schema time
(a bad value is a located ``file:line:col`` error):
  ``Identifier``    becomes a Python name or attribute (module names, norm names, block keys, the class prefix):
                    ASCII ``[A-Za-z_][A-Za-z0-9_]*``, not a keyword, not a dunder;
  tensor names      checkpoint names and patterns (``TensorName``, ``ExpertPattern``, ``KeyPattern``, ``RenamePart``):
                    dotted ``[A-Za-z0-9_]`` segments, ``{e}`` only in expert patterns, ``*`` only in ignore patterns;
  free text         (descriptions, messages): reaches Python source only through render.py's literal and docstring
                    filters, never pasted raw.
"""
from __future__ import annotations

import keyword
import re
from typing import Annotated, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

Expression = Union[str, int, float, bool]  # parsed by codegen.expr in lowering


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SEGMENT = r"[A-Za-z0-9_]+"


def check_identifier(value: str) -> str:
    if not _IDENTIFIER.fullmatch(value):
        raise ValueError(f"{value!r} is not a Python identifier (ASCII letters, digits, _; not starting with a digit)")
    if keyword.iskeyword(value):
        raise ValueError(f"{value!r} is a Python keyword; pick another name")
    if value.startswith("__") and value.endswith("__"):
        raise ValueError(f"{value!r} is a dunder name, reserved by Python")
    return value


def _grammar(pattern: str, what: str):
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return AfterValidator(check)


Identifier = Annotated[str, AfterValidator(check_identifier)]
TensorName = Annotated[str, _grammar(
    rf"{_SEGMENT}(\.{_SEGMENT})*", "a tensor name (dot-separated segments of letters, digits and _)")]
ExpertPattern = Annotated[str, _grammar(
    r"(?:[A-Za-z0-9_]|\{e\})+(?:\.(?:[A-Za-z0-9_]|\{e\})+)*",
    "an expert tensor-name pattern (dot-separated segments of letters, digits, _ and {e} = expert index)")]
KeyPattern = Annotated[str, _grammar(
    r"[A-Za-z0-9_*]+(?:\.[A-Za-z0-9_*]+)*", "a checkpoint key pattern (dot-separated segments; * = any segment)")]
RenameFrom = Annotated[str, _grammar(r"[A-Za-z0-9_.]+", "a key substring (letters, digits, _ and .)")]
RenameTo = Annotated[str, _grammar(r"[A-Za-z0-9_.]*", "a key substring (letters, digits, _ and .)")]
ConfigKey = Annotated[str, _grammar(
    r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*", "a config.json key (dotted = nested)")]


# ---------------------------------------------------------------------------------------------- shared sub-sections
NormKind = Literal["rms", "zero_centred_rms"]
NORM_KINDS_DOC = (
    "rms: x * rsqrt(mean(x^2) + eps) * weight (LlamaRMSNorm); zero_centred_rms: the weight is stored as an offset "
    "from one and applied as (1 + weight) in float32 (Qwen3NextRMSNorm, GemmaRMSNorm)"
)

class NormSpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. input_layernorm")
    kind: NormKind = Field(description=NORM_KINDS_DOC)
    eps: Expression


class RopeSpec(Strict):
    style: Literal["rotate_half", "pairwise"] = Field(
        description="rotate_half: HF Llama (pairs i, i+d/2); pairwise: GPT-J / llama.cpp (pairs 2i, 2i+1)"
    )
    theta: Expression
    scaling: Expression | None = Field(default=None, description="the rope_scaling / rope_parameters dict field")
    max_position: Expression
    partial_factor: Expression = Field(default=1.0, description="fraction of head_dim that is rotated")
