"""Checkpoint-name rewriting, free of model and tensor state so it is unit-tested on its own (ATOM weight_names.py).

* ``apply_renames``: substring renames (``weight_scale_inv`` -> ``weight_scale``), applied to every checkpoint key.
* ``IgnoreRules``: glob-like patterns (``*`` = one dotted segment or part of one) of keys dropped on purpose.
* ``resolve_packed``: HF module name -> (fused parameter, shard id) via ``packed_modules_mapping``.
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping


def apply_renames(key: str, renames: Iterable[tuple[str, str]]) -> str:
    """Substring renames, applied in order (``weight_scale_inv`` -> ``weight_scale``, ``.block_sparse_moe.`` -> ``.mlp.``)."""
    for old, new in renames:
        if old in key:
            key = key.replace(old, new)
    return key


class IgnoreRules:
    def __init__(self, patterns: Iterable[str]):
        self.patterns = tuple(patterns)
        self._regexes = [re.compile("^" + re.escape(p).replace(r"\*", r"[^.]*") + "$") for p in self.patterns]

    def match(self, key: str) -> str | None:
        """The pattern that ignores ``key``, or None."""
        for pattern, rx in zip(self.patterns, self._regexes):
            if rx.match(key):
                return pattern
        return None


def resolve_packed(key: str, packed: Mapping[str, tuple[str, object]]) -> tuple[str, object | None]:
    """``model.layers.0.self_attn.k_proj.weight`` -> (``model.layers.0.self_attn.qkv_proj.weight``, ``"k"``).

    Matches whole dotted segments, so ``q_proj`` never matches inside ``q_a_proj``.
    """
    parts = key.split(".")
    for i, part in enumerate(parts):
        if part in packed:
            fused, shard = packed[part]
            return ".".join(parts[:i] + [fused] + parts[i + 1 :]), shard
    return key, None
