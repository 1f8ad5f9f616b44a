"""Targets: one room per hardware target, and the one list of them.

``TARGETS`` is the single definition codegen (``modelgen build --target``, the templates it renders) and the runtime
(the model registry, ``LLM(target=...)``) both use. This module imports nothing heavy, so ``modelgen build`` stays
torch-free; :func:`get_target` imports a target's package only when the engine asks for it.

A target package (``rocm/``, ``neuron/``) holds what only that target needs at run time: its runner (how a scheduled
step becomes model inputs), its graphs or compiled buckets, and the glue that loads weights through the model's
``load_weights(checkpoint)``. Its ``TARGET`` object is what the engine talks to (:class:`Target`, in ``base.py``).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Target

# Every target modelgen generates code for; generated/<target>/ and templates/<target>/ follow this list.
TARGETS: tuple[str, ...] = ("rocm", "neuron", "vllm")

# The targets modelgen's own engine runs (LLM(target=...), `modelgen run` / `serve` / `coverage`). The vllm target's
# output is run by vLLM itself, through modelgen's vLLM plugin (runtime/vllm/plugin.py), never by this engine.
ENGINE_TARGETS: tuple[str, ...] = tuple(t for t in TARGETS if t != "vllm")


def check_target(name: object) -> str:
    """``name`` if it is a known target, else a ValueError naming the choices."""
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r}; expected one of {', '.join(TARGETS)}")
    return name  # type: ignore[return-value]


def check_engine_target(name: object) -> str:
    """``name`` if modelgen's engine runs it, else a ValueError (the vllm target names how it is served)."""
    if check_target(name) not in ENGINE_TARGETS:
        raise ValueError(f"the {name} target is served by vLLM (`vllm serve CHECKPOINT` with modelgen installed), not "
                         f"by modelgen's engine; expected one of {', '.join(ENGINE_TARGETS)}")
    return name  # type: ignore[return-value]


def get_target(name: str) -> "Target":
    """The run-time object of target ``name`` (imports that target's package, and torch, on first use)."""
    return importlib.import_module(f"{__name__}.{check_engine_target(name)}").TARGET
