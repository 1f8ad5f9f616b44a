"""Targets: one room per hardware target, and the one list of them.

``TARGETS`` (defined in ``modelgen/targets.py``, which the compiler imports too) is re-exported here for the runtime
(the model registry, ``LLM(target=...)``). This module imports nothing heavy; :func:`get_target` imports a target's
package only when the engine asks for it.

A target package (``rocm/``, ``neuron/``) holds what only that target needs at run time: its runner (how a scheduled
step becomes model inputs), its graphs or compiled buckets, and the glue that loads weights through the model's
``load_weights(checkpoint)``. Its ``TARGET`` object is what the engine talks to (:class:`Target`, in ``base.py``).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# The one list of targets and its checks live below both the compiler and the runtime (modelgen/targets.py).
from modelgen.targets import ENGINE_TARGETS, TARGETS, check_engine_target, check_target

__all__ = ["ENGINE_TARGETS", "TARGETS", "check_engine_target", "check_target", "get_target"]

if TYPE_CHECKING:
    from .base import Target


def get_target(name: str) -> "Target":
    """The run-time object of target ``name`` (imports that target's package, and torch, on first use)."""
    return importlib.import_module(f"{__name__}.{check_engine_target(name)}").TARGET
