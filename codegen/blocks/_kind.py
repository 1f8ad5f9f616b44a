"""What a block kind plugs in (see codegen/blocks/__init__.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from pydantic import BaseModel

from ..ir import Module, Norm, Rope, Value


class LoweringContext(Protocol):
    """What codegen/lower.py offers a kind's ``lower``; paths are spec key paths, for located errors."""

    def value(self, path: tuple[Any, ...], expr: Any) -> Value: ...

    def optional(self, path: tuple[Any, ...], expr: Any) -> Value | None: ...

    def norm(self, path: tuple[Any, ...], spec: Any) -> Norm: ...

    def rope(self, path: tuple[Any, ...], spec: Any) -> Rope: ...

    def error(self, path: tuple[Any, ...], message: str) -> None: ...


@dataclass(frozen=True)
class Kind:
    """A block kind: its spec model (the ``kind:`` literal is the discriminator), its IR class and its lowering.

    Its partials are ``templates/<target>/blocks/<name>.py.j2``; their macros render the class (``module_class``),
    its constructor call inside a decoder layer (``construct``), its imports (``imports``, ``from M import names``
    lines, merged across kinds) and, on neuron, its checkpoint mapping (``mapping_function``, ``map_call``).
    Optional macros: ``config_checks`` (neuron factory), ``weight_tables`` / ``loader_tables`` (rocm: tables the
    kind's weights need in weights.py, e.g. MoE expert mappings, and the loader keywords that take them).
    """

    name: str
    spec: type[BaseModel]
    ir: type[Module]
    lower: Callable[[LoweringContext, tuple[Any, ...], Any], Module]

    @property
    def slot(self) -> str:
        return self.ir.slot

    def partial(self, target: str) -> str:
        return f"{target}/blocks/{self.name}.py.j2"
