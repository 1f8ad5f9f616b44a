"""Scaffolding the state-kind layer tests share (tests/test_short_conv_layer.py, test_mamba_layer.py,
test_mamba2_layer.py, test_lightning_attention_layer.py): the layer is loaded from transformers' module, bound to a
state pool, and driven through flattened steps (:class:`StateMetadata` per step) in the same scenarios -- prefill then
decode, chunked prefill, two interleaved sequences, a slot reused by a fresh request, padding rows, the fixed-shape
speculative window. Each helper runs a scenario and returns what it produced; the tests keep their assertions (against
transformers' whole-sequence output, which each test computes with its own module).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from modelgen.runtime.state_cache import PAD_SLOT, StateMetadata, StatePool


def copy_weights(ref: torch.nn.Module, ours: torch.nn.Module,
                 rename: Callable[[str], str] = lambda name: name) -> dict[str, torch.nn.Parameter]:
    """Load each of ``ours``' parameters from ``ref``'s parameter ``rename(name)``, through its weight_loader where it
    has one (as the checkpoint loader does); returns ``ref``'s parameters by name."""
    theirs = dict(ref.named_parameters())
    for name, param in ours.named_parameters():
        src = theirs[rename(name)].detach()
        loader = getattr(param, "weight_loader", None)
        loader(param, src) if loader else param.data.copy_(src)
    return theirs


def bind_pool(layer, slots: int = 4) -> StatePool:
    """A state pool of ``slots`` slots holding ``layer``'s state, bound to it."""
    pool = StatePool([layer.state_spec()], slots)
    layer.bind_state(*pool.tensors()[layer.layer_name])
    return pool


def hf_output(ref: torch.nn.Module, x: torch.Tensor, *args) -> torch.Tensor:
    """transformers' module over one whole sequence ``x [n, hidden]`` (no cache) -> ``[n, hidden]``."""
    with torch.no_grad():
        out = ref(x.unsqueeze(0), *args)
    return (out[0] if isinstance(out, tuple) else out)[0]


def step(layer, segments: list[tuple[torch.Tensor, int, bool]]) -> list[torch.Tensor]:
    """One flattened step: (tokens [n, hidden], slot, fresh) per sequence -> each sequence's output."""
    x = torch.cat([s[0] for s in segments])
    meta = StateMetadata.build([len(s[0]) for s in segments], [s[1] for s in segments], [s[2] for s in segments])
    with torch.no_grad():
        y = layer(x, meta)
    return list(y.split([len(s[0]) for s in segments]))


def err(got: list[torch.Tensor], want: torch.Tensor) -> float:
    return (torch.cat(got) - want).abs().max().item()


# ------------------------------------------------------------------------------------------------------- scenarios
def prefill_then_decode(layer, x: torch.Tensor, prefill: int) -> list[torch.Tensor]:
    """Slot 0: ``x[:prefill]`` in one step, then decode-only steps (the batched, host-read-free path) for the rest."""
    got = step(layer, [(x[:prefill], 0, True)])
    for t in range(prefill, len(x)):
        got += step(layer, [(x[t:t + 1], 0, False)])
    return got


def chunked_prefill(layer, x: torch.Tensor) -> list[torch.Tensor]:
    """Slot 1: ``x`` prefilled as 2 tokens, 1 token, then the rest."""
    return step(layer, [(x[:2], 1, True)]) + step(layer, [(x[2:3], 1, False)]) + step(layer, [(x[3:], 1, False)])


def interleaved(layer, a: torch.Tensor, b: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Continuous batching: A (slot 2) prefills 5 tokens, then decodes beside B's (slot 0) 6-token prefill, then both
    decode twice (in the other order) -> (A's outputs for ``a[:8]``, B's for ``b[:8]``)."""
    out_a = step(layer, [(a[:5], 2, True)])
    da, pb = step(layer, [(a[5:6], 2, False), (b[:6], 0, True)])
    out_a.append(da)
    out_b = [pb]
    for t in range(2):
        db, da = step(layer, [(b[6 + t:7 + t], 0, False), (a[6 + t:7 + t], 2, False)])
        out_a.append(da)
        out_b.append(db)
    return out_a, out_b


def dirty_slot(layer, hidden: int, slot: int = 3) -> None:
    """An earlier request (6 large random tokens) leaves ``slot`` dirty."""
    step(layer, [(torch.randn(6, hidden) * 5, slot, True)])


def fresh_request(layer, x: torch.Tensor, prompt_len: int, slot: int = 3) -> list[torch.Tensor]:
    """A fresh request in ``slot``: a ``prompt_len``-token prompt (one token takes the decode-only path while fresh),
    one decode step, then the rest of ``x``."""
    got = step(layer, [(x[:prompt_len], slot, True)])
    got += step(layer, [(x[prompt_len:prompt_len + 1], slot, False)])
    got += step(layer, [(x[prompt_len + 1:], slot, False)])
    return got


def fill_slots_0_and_1(layer, hidden: int) -> None:
    """Two 4-token requests in slots 0 and 1."""
    step(layer, [(torch.randn(4, hidden), 0, True), (torch.randn(4, hidden), 1, True)])


def padding_rows_step(layer, hidden: int, tokens: int = 4) -> torch.Tensor:
    """One decode step of 4 rows of which only row 1 (slot 1) is real, over ``tokens`` random tokens (beyond 4: padding
    tokens past the batch) -> the layer's output ``[tokens, hidden]``."""
    x = torch.randn(tokens, hidden)
    meta = StateMetadata.build([1, 1, 1, 1], [PAD_SLOT, 1, PAD_SLOT, PAD_SLOT], [False] * 4)
    with torch.no_grad():
        return layer(x, meta)


def speculative_window(layer, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The fixed-shape window (tokens_per_seq = 3) after slots 0 / 1 prefilled ``a[:5]`` / ``b[:5]``: ``a[5:8]`` and
    ``b[5:7]`` (2 real tokens, one padding) -> the layer's output ``[6, hidden]``."""
    x = torch.cat([a[5:8], b[5:7], torch.zeros(1, a.shape[1])])
    meta = StateMetadata(torch.tensor([0, 3, 6], dtype=torch.int32), torch.tensor([0, 1]),
                         torch.tensor([False, False]), tokens_per_seq=3, seq_lens=torch.tensor([3, 2]))
    with torch.no_grad():
        return layer(x, meta)


def prefill_two(layer, a: torch.Tensor, b: torch.Tensor) -> None:
    """Slots 0 and 1 prefill ``a[:5]`` and ``b[:5]`` in one step (before :func:`speculative_window`)."""
    step(layer, [(a[:5], 0, True), (b[:5], 1, True)])
