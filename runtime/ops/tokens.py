"""Token ids fed back on the device: a decode step's input ids may name a row of the previous step's greedy output.

Why: a greedy decode step's next input is the previous step's argmax. Keeping it on the device lets the engine
launch step n+1 before it has read step n's tokens (``runtime/engine/llm.py``, pipelined greedy decode), so the host's
bookkeeping overlaps the GPU instead of idling it between steps. The encoding rides on the ids the scheduler already
sends (also to tensor-parallel followers): ``id >= 0`` is a token, ``id = -1 - r`` means "row r of ``chain``", the
buffer the previous step's argmax was written into.
"""
from __future__ import annotations

import torch


def from_chain(row: int) -> int:
    """The id that stands for row ``row`` of the previous step's greedy output."""
    return -1 - row


def chain_token_ids(ids: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
    """``ids`` with every ``-1 - r`` replaced by ``chain[r]`` (int64, same shape; a new tensor)."""
    from . import gpu

    if gpu.enabled(ids):
        from .gpu import tokens

        return tokens.chain_token_ids(ids, chain)
    return torch.where(ids >= 0, ids, chain[(-1 - ids).clamp(min=0)])
