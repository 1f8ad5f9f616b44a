"""Swap classes in a generated module's namespace while its model is built: how the parallel modes change what the
generated constructor builds without a line of generated code knowing (pipeline stages build the layers they do
not own on the meta device, attention data parallelism builds its MLP / MoE blocks over the whole world).

Its own module, below both ``pipeline.py`` and ``attention_dp.py`` (``pipeline.py`` hands attention-DP builds to
``attention_dp.py``, so the helper they share cannot live in either).
"""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def swapped_classes(namespace: dict, replacements: dict):
    """Inside: ``namespace`` (a module's ``vars()``) maps each name of ``replacements`` to its stand-in; the
    originals come back on leaving, also when the build raises."""
    saved = {k: namespace[k] for k in replacements}
    namespace.update(replacements)
    try:
        yield
    finally:
        namespace.update(saved)
