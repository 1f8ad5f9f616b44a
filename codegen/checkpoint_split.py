"""``checkpoint.split``: checkpoint modules stored already fused, read as their parts (the reverse of ``fuse``).

Phi-3 stores ``qkv_proj`` (q rows, then k, then v) and ``gate_up_proj`` (gate, then up) where Llama-style checkpoints
store ``q_proj``/``k_proj``/``v_proj`` and ``gate_proj``/``up_proj``. A split names the stored module, the axis and
the part modules in storage order with their sizes (expressions over config fields)::

    split:
      qkv_proj:
        parts: {q_proj: num_attention_heads * head_dim, k_proj: num_key_value_heads * head_dim, ...}

A tensor interleaved in repeating groups (GPT-NeoX ``query_key_value``: ``[heads, 3, head_dim]`` rows; Falcon-40B:
``[kv_heads, q_per_kv + 2, head_dim]``) names ``groups:`` (an expression): the parts' sizes are then per group, and
each part is the concatenation of its rows over the groups.

Every tensor of the stored module (``.weight``, ``.bias``) is then read as the tensors its parts would be if stored
separately, so the parameters, fusions and both targets' loaders see the familiar names
(``runtime/loader/split.py``). Here: the schema (used by ``codegen/schema.py``), the IR and its lowering.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from .ir import Value
from .spec_types import Expression, Identifier, Strict


class SplitSpec(Strict):
    """One checkpoint module stored fused: its parts in storage order along ``axis``."""

    axis: int = Field(default=0, ge=0, le=1, description="dimension the parts are concatenated on (0: output rows)")
    parts: dict[Identifier, Expression] = Field(
        min_length=2,
        description="checkpoint module of each part -> its size along `axis` (expression over config fields), in "
        "storage order, e.g. {q_proj: num_attention_heads * head_dim, k_proj: num_key_value_heads * head_dim, ...}",
    )
    groups: Expression | None = Field(
        default=None, description="the parts repeat in this many interleaved groups along `axis` (sizes are then per "
        "group), e.g. num_attention_heads for GPT-NeoX's [heads, 3, head_dim] query_key_value rows; default: one",
    )


@dataclass(frozen=True)
class Split:
    module: str  # the stored module, e.g. qkv_proj
    axis: int
    parts: tuple[tuple[str, Value], ...]  # (part module, size) in storage order
    groups: Value | None = None  # interleaved groups the parts repeat in (sizes per group); None: one

    def part_names(self) -> tuple[str, ...]:
        return tuple(p for p, _ in self.parts)


def lower_splits(ctx: Any, splits: dict[str, SplitSpec]) -> tuple[Split, ...]:
    """The IR of ``checkpoint.split``; a part named twice, or a part that is itself split, is a located error."""
    out, owner = [], {}
    for module, spec in splits.items():
        path = ("checkpoint", "split", module)
        for part in spec.parts:
            if part in splits:
                ctx.error(path + ("parts", part), f"'{part}' is itself a split module; parts are stored names' pieces")
            elif part in owner:
                ctx.error(path + ("parts", part), f"part '{part}' is already a part of split '{owner[part]}'")
            owner.setdefault(part, module)
        sizes = tuple((part, ctx.value(path + ("parts", part), size)) for part, size in spec.parts.items())
        groups = ctx.value(path + ("groups",), spec.groups) if spec.groups is not None else None
        out.append(Split(module=module, axis=spec.axis, parts=sizes, groups=groups))
    return tuple(out)
