"""Strict-coverage bookkeeping shared by both targets' loaders.

Every parameter must be filled exactly once (per shard for fused parameters) and every checkpoint tensor must be used
or explicitly ignored; on failure one :class:`CheckpointError` lists both sides.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Iterable

from .checkpoint import CheckpointError

_SHOW = 20
log = logging.getLogger("modelgen.loader")


def _fmt(title: str, items: list[str]) -> str:
    shown = "\n".join(f"    {x}" for x in items[:_SHOW])
    more = f"\n    ... and {len(items) - _SHOW} more" if len(items) > _SHOW else ""
    return f"  {title} ({len(items)}):\n{shown}{more}"


class Coverage:
    def __init__(self, checkpoint_keys: Iterable[str], expected: Iterable[tuple[str, object]]):
        self.unused = set(checkpoint_keys)  # checkpoint keys not consumed yet
        self.expected = set(expected)  # (param name, shard id or None) still to fill
        self.filled: dict[tuple[str, object], str] = {}
        self.ignored: dict[str, str] = {}

    def ignore(self, key: str, why: str) -> None:
        self.unused.discard(key)
        self.ignored[key] = why

    def fill(self, param: str, shard: object, key: str) -> None:
        slot = (param, shard)
        if slot in self.filled:
            raise CheckpointError(
                f"parameter '{param}'" + (f" shard {shard!r}" if shard is not None else "")
                + f" is filled twice: by '{self.filled[slot]}' and by '{key}'"
            )
        self.filled[slot] = key
        self.expected.discard(slot)
        self.unused.discard(key)

    def check(self, where: str) -> None:
        for why, n in sorted(Counter(self.ignored.values()).items()):
            log.info("%s: skipped %d checkpoint tensor(s): %s", where, n, why)  # shown by `modelgen run --verbose`
        missing = sorted(f"{p}" + (f" (shard {s!r})" if s is not None else "") for p, s in self.expected)
        unexpected = sorted(self.unused)
        if missing or unexpected:
            parts = [f"checkpoint {where} does not match the model:"]
            if missing:
                parts.append(_fmt("parameters with no checkpoint tensor (missing)", missing))
            if unexpected:
                parts.append(_fmt("checkpoint tensors used by no parameter (unexpected; add to checkpoint.ignore if intended)", unexpected))
                from .quantization import quantized_tensor_hint

                hint = quantized_tensor_hint(unexpected)
                if hint:
                    parts.append(f"  note: {hint}")
            raise CheckpointError("\n".join(parts))
