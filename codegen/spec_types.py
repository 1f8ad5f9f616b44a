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

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

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
NormKind = Literal["rms", "zero_centred_rms", "rms_float32", "layer_norm"]
NORM_KINDS_DOC = (
    "rms: x * rsqrt(mean(x^2) + eps) * weight, x_hat rounded to the model dtype before the weight (LlamaRMSNorm); "
    "zero_centred_rms: the weight is stored as an offset from one and applied as (1 + weight) in float32 "
    "(Qwen3NextRMSNorm, GemmaRMSNorm); rms_float32: weight * x_hat in float32, rounded once (Olmo2RMSNorm, "
    "T5LayerNorm); layer_norm: (x - mean) / sqrt(var + eps) * weight + bias (nn.LayerNorm)"
)


class NormSpec(Strict):
    name: Identifier = Field(description="module / checkpoint name, e.g. input_layernorm")
    kind: NormKind = Field(description=NORM_KINDS_DOC)
    eps: Expression = Field(description="epsilon, e.g. rms_norm_eps")
    bias: Expression | None = Field(
        default=None, description="layer_norm only: a learned bias (nn.LayerNorm(bias=...)); default true"
    )
    affine: bool = Field(
        default=True, description="false: no learned weight (or bias), as nn.LayerNorm(elementwise_affine=False)"
    )

    @model_validator(mode="after")
    def _bias_on_layer_norm(self) -> "NormSpec":
        if self.bias is not None and self.kind != "layer_norm":
            raise ValueError(f"`bias` applies to kind layer_norm only (this norm is {self.kind})")
        if self.bias is not None and not self.affine and self.bias is not False:
            raise ValueError("a non-affine norm has no bias; drop `bias` or set `affine: true`")
        return self


class RopeSpec(Strict):
    style: Literal["rotate_half", "pairwise"] = Field(
        description="rotate_half: HF Llama (pairs i, i+d/2); pairwise: GPT-J / llama.cpp (pairs 2i, 2i+1)"
    )
    theta: Expression = Field(description="RoPE base, usually rope_theta")
    scaling: Expression | None = Field(default=None, description="the rope_scaling / rope_parameters dict field")
    max_position: Expression = Field(description="rows of the RoPE table, usually max_position_embeddings")
    partial_factor: Expression = Field(default=1.0, description="fraction of head_dim that is rotated")
    enabled: bool = Field(
        default=True, description="false: a NoPE layer, no rotary embedding at all (SmolLM3 no_rope_layers, EXAONE 4 "
        "full-attention layers, Llama 4); pick those layers with a block of their own and layers.block_rule",
    )
