"""Progress bars (tqdm) for the slow first-run steps: the SmolLM2 wheel download, its GGUF extraction and
conversion, and weight loading.

Convention: ``progress=None`` (the default everywhere) is tqdm's own ``disable=None``, i.e. bars are drawn only when
stderr is a terminal, so logs, pipes and test captures stay clean; ``True`` forces them, ``False`` (``modelgen run
--json``) silences them."""
from __future__ import annotations

import sys


def bar(progress: bool | None, **kwargs):
    """A tqdm bar on stderr; ``progress`` as in the module docstring."""
    from tqdm.auto import tqdm

    disable = None if progress is None else not progress
    return tqdm(file=sys.stderr, disable=disable, leave=False, dynamic_ncols=True, **kwargs)


class CountingCheckpoint:
    """A checkpoint as the model's loader sees it, advancing ``pbar`` by one per tensor read; everything else is the
    wrapped object's (attribute lookups are delegated, so the loader's ``raw_reads`` and friends stay the same)."""

    def __init__(self, checkpoint, pbar):
        self._checkpoint = checkpoint
        self._pbar = pbar

    def get_tensor(self, name: str):
        tensor = self._checkpoint.get_tensor(name)
        self._pbar.update(1)
        return tensor

    def __getattr__(self, name: str):
        return getattr(self._checkpoint, name)
