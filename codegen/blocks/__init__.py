"""Block kinds as plug-ins: each module here defines ``KIND`` (codegen/blocks/_kind.py) for one kind of attention or
MLP, and is found by name. A new kind is this module (schema model + IR class + lowering), one partial per target
(``templates/<target>/blocks/<kind>.py.j2``) and its runtime layer; nothing else in codegen changes.
"""
from __future__ import annotations

import importlib
import pkgutil

from ._kind import Kind, LoweringContext


def _discover() -> dict[str, Kind]:
    kinds: dict[str, Kind] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        kind = importlib.import_module(f"{__name__}.{info.name}").KIND
        if kind.name != info.name or kind.ir.kind != kind.name:
            raise ImportError(f"codegen/blocks/{info.name}.py defines kind {kind.name!r}; name it after its module")
        kinds[kind.name] = kind
    return kinds


KINDS: dict[str, Kind] = _discover()


def specs_for(slot: str) -> tuple[type, ...]:
    """The spec models of every kind that fills ``slot`` ("attention" | "mlp"), in name order."""
    return tuple(k.spec for k in KINDS.values() if k.slot == slot)


__all__ = ["KINDS", "Kind", "LoweringContext", "specs_for"]
