"""Per-request state pool for recurrent layers (Gated DeltaNet, Mamba-2, Mamba-1, LFM2 short conv, lightning attention).

A K/V cache grows with the sequence and is paged; a recurrent layer instead keeps a fixed-size state per request, so
its cache is a pool of *slots*: one slot per running request, the same slot index in every recurrent layer.

A layer declares what one slot holds with :class:`StateSpec` (e.g. the ``state_spec()`` of
``runtime/layers/gated_deltanet/layer.py``; a kind that keeps only one of the two parts leaves the other out); :class:`StatePool` allocates ``[num_slots, ...]`` tensors for every
declared layer, counts their bytes for the engine's memory budget, and hands slots to sequences (``allocate`` at
admission, ``free`` at the end or on preemption). Running out of slots raises :class:`StateFullError`, a
:class:`~modelgen.runtime.kv_cache.CacheFullError`, so the scheduler's existing "preempt or refuse" handling
applies unchanged.

Slot ``-1`` (:data:`PAD_SLOT`) marks a padding sequence in a batch: layers never read or write it.
:class:`StateMetadata` is a step's view of the pool (each sequence's slot, fresh flag, token offsets): the runners
build it, the recurrent layers read it, so it lives here with the pool rather than in one layer kind's folder.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from .kv_cache import CacheFullError

PAD_SLOT = -1
NO_STATE: tuple[int, ...] = (0,)  # a slot part the kind does not keep: the pool holds an empty [num_slots, 0] tensor


class StateFullError(CacheFullError):
    """Raised when every state slot is held by another sequence."""


@dataclass(frozen=True, kw_only=True)
class StateSpec:
    """What one slot of one recurrent layer holds (per tensor-parallel rank).

    name            : layer name, the key of the pool's tensors (e.g. ``"layers.0.linear_attn"``)
    conv_shape      : ``(conv_dim, K - 1)``: the last K-1 inputs of the depthwise causal conv1d (q, k, v channels);
                      :data:`NO_STATE` (the default) for a kind without a conv (lightning attention)
    conv_dtype      : model dtype (transformers keeps the conv state in the dtype of the projected q/k/v)
    recurrent_shape : ``(num_v_heads, head_k_dim, head_v_dim)``: the delta-rule state S (Mamba-2 ``(heads, head_dim,
                      state)``, Mamba-1 ``(channels, state)``); :data:`NO_STATE` (the default) for a kind that keeps
                      only the conv history (LFM2 short conv)
    recurrent_dtype : float32 by default: transformers' torch functions and fla's kernels both return the final state
                      in float32 and HF's cache stores it as returned (``zeros_like`` of it); a bf16 state would round
                      on every decode step of a long generation. vLLM exposes the choice (``mamba_ssm_cache_dtype``);
                      ``GatedDeltaNet(state_dtype=...)`` does too.
    kind            : cache kind for ``KVSpec``-style dispatch (``"recurrent_state"``)
    """

    name: str
    conv_shape: tuple[int, ...] = NO_STATE
    conv_dtype: torch.dtype = torch.float32
    recurrent_shape: tuple[int, ...] = NO_STATE
    recurrent_dtype: torch.dtype = torch.float32
    kind: str = "recurrent_state"
    #: one slot per running request, not paged blocks (``KVSpec.request_states``)
    per_request_state: ClassVar[bool] = True

    def check_bound(self, owner: str, **tensors: torch.Tensor) -> None:
        """Raise a one-line ValueError unless each pool tensor a layer is bound to is ``[num_slots, *shape]`` of the
        declared dtype, and all have the same number of slots. Keyword names say which part each is: ``conv_state``
        (checked against ``conv_shape``), anything else (``recurrent_state``, ``ssm_state``) against
        ``recurrent_shape`` -- the name the layer uses appears in the message."""
        for what, t in tensors.items():
            shape, dtype = ((self.conv_shape, self.conv_dtype) if what == "conv_state"
                            else (self.recurrent_shape, self.recurrent_dtype))
            if t.dim() != len(shape) + 1 or tuple(t.shape[1:]) != tuple(shape) or t.dtype != dtype:
                raise ValueError(f"{owner}: {what} has shape {tuple(t.shape)} dtype {t.dtype}, "
                                 f"expected [num_slots, {', '.join(map(str, shape))}] {dtype}")
        slots = {what: t.shape[0] for what, t in tensors.items()}
        if len(set(slots.values())) > 1:
            raise ValueError(f"{owner}: " + ", ".join(f"{what} has {n} slots" for what, n in slots.items()))

    def bytes_per_slot(self) -> int:
        def nbytes(shape, dtype) -> int:
            n = 1
            for d in shape:
                n *= d
            return n * torch.empty((), dtype=dtype).element_size()

        return nbytes(self.conv_shape, self.conv_dtype) + nbytes(self.recurrent_shape, self.recurrent_dtype)

    def bytes_per_block(self, block_size: int) -> int:
        """0: a recurrent layer takes no paged K/V blocks, so a ``StateSpec`` can sit in ``KVSpec.layers`` beside the
        ``LayerSpec``s (kind ``recurrent_state``) without changing the block budget; its memory is per slot."""
        return 0


class StatePool:
    """``num_slots`` slots of every layer in ``specs``, zero-initialised, plus the slot bookkeeping of sequences.

    ``tensors()`` maps each layer name to ``(conv_state [num_slots, *conv_shape], recurrent_state [num_slots,
    *recurrent_shape])``, what the layers' ``bind_state`` takes.
    """

    def __init__(self, specs: list[StateSpec], num_slots: int, device: torch.device | str = "cpu"):
        if num_slots < 1:
            raise ValueError(f"StatePool: num_slots must be positive, got {num_slots}")
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"StatePool: duplicate layer names in the state specs: {names}")
        for s in specs:
            if s.kind != "recurrent_state":
                raise ValueError(f"StatePool: {s.name}: state kind {s.kind!r} is not 'recurrent_state'")
        self.specs = list(specs)
        self.num_slots = num_slots
        self.conv: dict[str, torch.Tensor] = {}
        self.recurrent: dict[str, torch.Tensor] = {}
        for s in self.specs:
            self.conv[s.name] = torch.zeros((num_slots, *s.conv_shape), dtype=s.conv_dtype, device=device)
            self.recurrent[s.name] = torch.zeros((num_slots, *s.recurrent_shape), dtype=s.recurrent_dtype,
                                                 device=device)
        # speculative verify windows: per-token states of each slot (enable_checkpoints), None until asked for
        self.checkpoints: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None
        self.free_slots: list[int] = list(range(num_slots - 1, -1, -1))  # pop() hands out low ids first
        self.slots: dict[int, int] = {}  # seq_id -> slot

    # -------------------------------------------------------------------------------------------------- memory
    @staticmethod
    def bytes_per_slot_of(specs: list[StateSpec]) -> int:
        """Bytes one slot costs across all layers: what the engine divides its state budget by, before allocating."""
        return sum(s.bytes_per_slot() for s in specs)

    def bytes_per_slot(self) -> int:
        return self.bytes_per_slot_of(self.specs)

    def tensors(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        return {name: (self.conv[name], self.recurrent[name]) for name in self.conv}

    # ------------------------------------------------------------------------------------------------ bookkeeping
    @property
    def num_free(self) -> int:
        return len(self.free_slots)

    def can_allocate(self, seq_id: int) -> bool:
        return seq_id in self.slots or bool(self.free_slots)

    def allocate(self, seq_id: int) -> int:
        """The slot of ``seq_id`` (a new, zeroed one at first call); StateFullError when none is free."""
        if seq_id in self.slots:
            return self.slots[seq_id]
        if not self.free_slots:
            raise StateFullError(
                f"state pool full: sequence {seq_id} needs a state slot, 0 free of {self.num_slots} "
                f"(held by sequences {sorted(self.slots)})"
            )
        slot = self.free_slots.pop()
        self.reset(slot)
        self.slots[seq_id] = slot
        return slot

    def slot(self, seq_id: int) -> int:
        try:
            return self.slots[seq_id]
        except KeyError:
            raise KeyError(f"state pool: sequence {seq_id} holds no state slot (allocate it at admission)") from None

    def free(self, seq_id: int) -> None:
        """Return ``seq_id``'s slot (no-op when it holds none, like ``BlockManager.release``)."""
        slot = self.slots.pop(seq_id, None)
        if slot is not None:
            self.free_slots.append(slot)

    # ------------------------------------------------------------------------------------- speculative rollback
    def snapshot(self, slots: list[int]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Copies of ``slots``' conv and recurrent states in every layer (taken before a speculative verify step,
        which advances a recurrent state over every draft token: the rejected ones must be undone)."""
        index = torch.tensor(slots, dtype=torch.int64, device=next(iter(self.conv.values())).device) if self.conv \
            else None
        return {name: (self.conv[name].index_select(0, index), self.recurrent[name].index_select(0, index))
                for name in self.conv}

    def enable_checkpoints(self, tokens: int) -> None:
        """Allocate ``checkpoints``: per layer ``(conv [num_slots, tokens, *conv_shape], recurrent [num_slots, tokens,
        *recurrent_shape])``, where a multi-token window (a graphed speculative verify step of ``tokens`` slots)
        leaves each sequence's state after each of its tokens, so a rejected draft is undone by :meth:`rewind`
        instead of a snapshot, a restore and a re-run. Costs ``tokens`` times the pool's memory."""
        if self.checkpoints is not None and next(iter(self.checkpoints.values()))[0].shape[1] >= tokens:
            return
        self.checkpoints = {
            name: (self.conv[name].new_zeros((self.num_slots, tokens, *self.conv[name].shape[1:])),
                   self.recurrent[name].new_zeros((self.num_slots, tokens, *self.recurrent[name].shape[1:])))
            for name in self.conv}

    def rewind(self, slots: list[int], kept: list[int]) -> None:
        """Set each slot ``slots[r]`` to its checkpoint after token ``kept[r] - 1`` of the last window (it keeps
        ``kept[r] >= 1`` of the window's tokens), in every layer."""
        if not slots:
            return
        device = next(iter(self.conv.values())).device
        # Up through pinned memory without waiting for the device (the draft graphs may still be running).
        idx = torch.tensor([slots, [k - 1 for k in kept]], dtype=torch.int64,
                           pin_memory=device.type == "cuda").to(device, non_blocking=True)
        dst, j = idx[0], idx[1]
        for name, (conv, recurrent) in self.checkpoints.items():
            self.conv[name].index_copy_(0, dst, conv[dst, j])
            self.recurrent[name].index_copy_(0, dst, recurrent[dst, j])

    def restore(self, slots: list[int], snapshot: dict[str, tuple[torch.Tensor, torch.Tensor]],
                rows: list[int] | None = None) -> None:
        """Write back rows ``rows`` (default: all) of a :meth:`snapshot` taken over ``slots`` into those slots."""
        rows = list(range(len(slots))) if rows is None else rows
        if not rows:
            return
        device = next(iter(self.conv.values())).device
        src = torch.tensor(rows, dtype=torch.int64, device=device)
        dst = torch.tensor([slots[r] for r in rows], dtype=torch.int64, device=device)
        for name, (conv, recurrent) in snapshot.items():
            self.conv[name].index_copy_(0, dst, conv.index_select(0, src))
            self.recurrent[name].index_copy_(0, dst, recurrent.index_select(0, src))

    def reset(self, slot: int) -> None:
        """Zero ``slot`` in every layer (a fresh request's conv history and delta-rule state are zeros)."""
        if not 0 <= slot < self.num_slots:
            raise IndexError(f"state pool: slot {slot} out of range [0, {self.num_slots})")
        for name in self.conv:
            self.conv[name][slot].zero_()
            self.recurrent[name][slot].zero_()


@dataclass
class StateMetadata:
    """Per-step description of the sequences of a flattened batch, for recurrent layers (built by the engine).

    cu_seqlens  : [num_seqs + 1] int32 token offsets of each sequence (the same tensor as
                  ``AttentionMetadata.cu_seqlens_q``); tokens at or past ``cu_seqlens[-1]`` are padding
    state_slots : [num_seqs] int64 state-pool slot of each sequence (``PAD_SLOT`` = -1: padding sequence, ignored)
    fresh       : [num_seqs] bool, True when the sequence has no computed token yet (its first prefill chunk): its
                  state is read as zeros whatever the slot holds, then written
    decode_only : every sequence has exactly one new token (``not AttentionMetadata.is_prefill``); sequence i is token
                  i. Runs the sync-free static path (no host reads: capturable in a CUDA graph, traceable fullgraph);
                  rows past the real batch are padding sequences with slot -1; slots are trusted to be distinct
                  (the host path checks it)
    tokens_per_seq : q > 0 for a fixed-shape multi-token step (a speculative verify window: the last token and the
                  drafts): sequence i owns token slots ``[i*q, (i+1)*q)``, the first ``seq_lens[i]`` of them real,
                  the rest padding (1 <= seq_lens[i] <= q; a padding sequence has slot -1). Also sync-free: the
                  layer runs its decode path once per slot column (Gated DeltaNet: ``_window_rows``)
    seq_lens    : [num_seqs] int64 real tokens of each sequence, with ``tokens_per_seq``
    checkpoints : with ``tokens_per_seq``, ``StatePool.checkpoints`` (or None): the layers also leave each
                  sequence's state after each real token of its window there (``StatePool.rewind`` reads them)
    """

    cu_seqlens: torch.Tensor
    state_slots: torch.Tensor
    fresh: torch.Tensor
    decode_only: bool = False
    tokens_per_seq: int = 0
    seq_lens: torch.Tensor | None = None
    checkpoints: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = field(default=None, repr=False, compare=False)
    _host: tuple[list[int], list[int], list[bool]] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def build(
        cls, query_lens: list[int], slots: list[int], fresh: list[bool], device: torch.device | str = "cpu"
    ) -> "StateMetadata":
        if not len(query_lens) == len(slots) == len(fresh):
            raise ValueError(
                f"StateMetadata: {len(query_lens)} query lengths, {len(slots)} slots, {len(fresh)} fresh flags "
                "(expected one of each per sequence)"
            )
        cu = [0]
        for n in query_lens:
            cu.append(cu[-1] + n)
        return cls(
            torch.tensor(cu, dtype=torch.int32, device=device),
            torch.tensor(slots, dtype=torch.int64, device=device),
            torch.tensor(fresh, dtype=torch.bool, device=device),
            decode_only=all(n == 1 for n in query_lens),
            _host=(cu, list(slots), [bool(f) for f in fresh]),
        )

    def host(self) -> tuple[list[int], list[int], list[bool]]:
        """(cu_seqlens, slots, fresh) as Python lists, read once per step and shared by every layer."""
        if self._host is None:
            self._host = (self.cu_seqlens.tolist(), self.state_slots.tolist(), [bool(f) for f in self.fresh.tolist()])
        return self._host


# Per-request state rows in a pool, read and written shape-statically (every kind with state in the pool uses these:
# CUDA-graph and Neuron traces need fixed shapes, so no boolean filtering).
def read_state_rows(pool: torch.Tensor, slots: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``pool[slots]`` for rows with ``keep``, zeros for the others (empty rows, fresh sequences)."""
    rows = pool.index_select(0, slots.clamp(min=0))
    keep = keep.view(*keep.shape, *([1] * (rows.dim() - keep.dim())))
    return torch.where(keep, rows, torch.zeros_like(rows))  # exact zeros: garbage / NaN in a slot never leaks


def write_state_rows(pool: torch.Tensor, slots: torch.Tensor, valid: torch.Tensor, new: torch.Tensor) -> None:
    """``pool[slots[r]] = new[r]`` for rows with ``valid``; other rows leave the pool bit-for-bit unchanged.

    Shape-static: a boolean filter would make shapes data-dependent, so every row writes, and an invalid row is
    redirected to the first valid row (same slot, same value: the repeated index writes one value, so the result does
    not depend on write order). With no valid row at all, every row rewrites slot ``max(slots[0], 0)`` with its own
    contents. Pool contents are never used in arithmetic, so garbage (NaN) in other slots cannot spread.
    """
    rows = torch.arange(valid.shape[0], device=valid.device)
    first = torch.argmax(valid.to(torch.int32))  # 0 when no row is valid
    src = torch.where(valid, rows, first)
    idx = slots.clamp(min=0).index_select(0, src)
    value = new.index_select(0, src).to(pool.dtype)
    value = torch.where(valid.index_select(0, src).view(-1, *([1] * (value.dim() - 1))), value, pool.index_select(0, idx))
    pool.index_copy_(0, idx, value)
