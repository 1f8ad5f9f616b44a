"""CUDA graphs of the rocm decode step, one per batch-size bucket.

A decode step is ~10 small launches per layer; replaying them from a graph removes the per-launch CPU cost that
otherwise dominates small-batch decode. Each bucket owns static inputs (one int64 device buffer holding token ids,
positions, slots, context lengths and the block table, filled from one pinned host buffer with a single copy) and
a static logits output. Rows past the real batch are padding: slot -1 (the cache is never written), context
length 1 (they attend to their own token only), so their outputs are finite and ignored.

Capture is lazy (first step that needs a bucket) and preceded by eager warm-up runs of that bucket, which compile
the Triton kernels and let the linear layers pick their GEMM per shape; no timing or host sync happens inside a
capture. All buckets share one memory pool: a graph's output is consumed (sampled) before any other graph replays.
"""
from __future__ import annotations

import numpy as np
import torch

from ... import distributed
from ...layers.attention import AttentionMetadata
from ...layers.kind import STEP_LAYOUTS, layer_kinds
from ...ops.tokens import chain_token_ids


def default_decode_buckets(max_num_seqs: int) -> list[int]:
    out = [b for b in (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256) if b < max_num_seqs]
    return out + [max_num_seqs]


class _Bucket:
    def __init__(self, batch: int, width: int, device: torch.device, with_state: bool = False):
        self.batch, self.width = batch, width
        self.with_state = with_state
        n = (6 if with_state else 4) * batch + batch * width
        self.device_buf = torch.zeros(n, dtype=torch.int64, device=device)
        self.host_buf = torch.zeros(n, dtype=torch.int64, pin_memory=True)
        self.host = self.host_buf.numpy()
        B = batch
        self.h_ids, self.h_pos, self.h_slot, self.h_ctx = (self.host[i * B:(i + 1) * B] for i in range(4))
        tab0 = 6 * B if with_state else 4 * B
        self.h_tab = self.host[tab0:].reshape(B, width)
        d = self.device_buf
        self.ids, self.pos, self.slot, self.ctx = (d[i * B:(i + 1) * B] for i in range(4))
        self.tab = d[tab0:].view(B, width)
        cu = torch.arange(B + 1, dtype=torch.int32, device=device)
        state = None
        if with_state:  # recurrent layers: each row's state slot (-1 = padding row) and fresh flag (0/1)
            from ...state_cache import StateMetadata

            self.h_state, self.h_fresh = self.host[4 * B:5 * B], self.host[5 * B:6 * B]
            self.state_slot, self.fresh_i64 = d[4 * B:5 * B], d[5 * B:6 * B]
            self.fresh = torch.zeros(B, dtype=torch.bool, device=device)  # refreshed inside the graph
            state = StateMetadata(cu, self.state_slot, self.fresh, decode_only=True)
        self.meta = AttentionMetadata(
            is_prefill=False, slot_mapping=self.slot, cu_seqlens_q=cu,
            context_lens=self.ctx, block_tables=self.tab, max_seqlen_q=1, state=state,
        )
        self.copied = torch.cuda.Event()
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None
        self.hidden: torch.Tensor | None = None  # the model's output (final hidden states), a static output too
        self.pad_from = 0  # host rows >= pad_from hold padding values
        self.set_padding(0)

    def set_padding(self, start: int) -> None:
        self.h_ids[start:] = 0
        self.h_pos[start:] = 0
        self.h_slot[start:] = -1
        self.h_ctx[start:] = 1
        if self.with_state:
            self.h_state[start:] = -1
            self.h_fresh[start:] = 0
        self.pad_from = start


class DecodeGraphs:
    """Static-shape decode steps replayed from CUDA graphs (see module docstring)."""

    def __init__(self, model: torch.nn.Module, device: torch.device, max_num_seqs: int, max_blocks_per_seq: int,
                 block_size: int, buckets: list[int] | None = None, with_state: bool = False,
                 chain: torch.Tensor | None = None):
        self.model, self.device = model, device
        # Greedy feedback (runtime/ops/tokens.py): every replay reads ids ``-1 - r`` from ``chain[r]`` and writes its
        # rows' argmax into ``chain``, so the engine can launch the next step before reading this one's tokens.
        self.chain = chain
        self.with_state = with_state
        self.block_size = block_size
        self.width = max_blocks_per_seq
        self.buckets = sorted(set(buckets or default_decode_buckets(max_num_seqs)))
        self._buckets: dict[int, _Bucket] = {}
        self.pool = None
        self.captures = 0

    def bucket_for(self, n: int) -> int | None:
        for b in self.buckets:
            if n <= b:
                return b
        return None

    def _forward(self, bk: _Bucket) -> tuple[torch.Tensor, torch.Tensor]:
        if bk.with_state:  # bool view of the copied 0/1 row flags, computed inside the graph
            torch.ne(bk.fresh_i64, 0, out=bk.fresh)
        ids = bk.ids if self.chain is None else chain_token_ids(bk.ids, self.chain)
        hidden = self.model(ids, bk.pos, bk.meta)
        logits = self.model.compute_logits(hidden)
        if self.chain is not None:
            torch.argmax(logits, -1, out=self.chain[: bk.batch])
        return logits, hidden

    def _capture(self, batch: int) -> _Bucket:
        bk = _Bucket(batch, self.width, self.device, self.with_state)
        bk.device_buf.copy_(bk.host_buf)
        for _ in range(2):  # warm-up: Triton compilation/autotuning, per-shape GEMM choice
            self._forward(bk)
        torch.cuda.synchronize(self.device)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # Under tensor parallelism the graph also captures the NCCL all-reduces / all-gathers (every rank captures
        # the same bucket at the same step: rank 0 broadcasts the steps). "thread_local" keeps the NCCL watchdog
        # thread's event queries legal while this thread captures ("global" would fail them).
        mode = "thread_local" if distributed.tp_size() > 1 else "global"
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode=mode):
            bk.logits, bk.hidden = self._forward(bk)
        torch.cuda.synchronize(self.device)
        bk.graph = graph
        self._buckets[batch] = bk
        self.captures += 1
        return bk

    def capture_all(self) -> None:
        for b in self.buckets:
            if b not in self._buckets:
                self._capture(b)

    def run(self, token_ids: list[int], positions: list[int], tables: list[list[int]],
            state_slots: list[int] | None = None, return_hidden: bool = False):
        """Logits ``[n, V]`` of one decode step: ``n`` sequences, each one new token at ``positions[i]``
        (``state_slots``: each sequence's recurrent-state slot, for models with recurrent layers).
        ``return_hidden``: ``(logits, hidden [n, hidden_size])``, the hidden states cloned out of the static output
        (the next replay of any bucket overwrites the shared pool, and a draft head reads them after other work)."""
        n = len(token_ids)
        batch = self.bucket_for(n)
        bk = self._buckets.get(batch) or self._capture(batch)
        bk.copied.synchronize()  # the previous step's copy has left the pinned buffer
        bs = self.block_size
        bk.h_ids[:n] = token_ids
        bk.h_pos[:n] = positions
        h_slot, h_ctx, h_tab = bk.h_slot, bk.h_ctx, bk.h_tab
        for i, (p, t) in enumerate(zip(positions, tables)):
            h_slot[i] = t[p // bs] * bs + p % bs
            h_ctx[i] = p + 1
            h_tab[i, : len(t)] = t
        if bk.with_state:
            bk.h_state[:n] = state_slots
            bk.h_fresh[:n] = [p == 0 for p in positions]
        if bk.pad_from != n:
            bk.set_padding(n)
        bk.device_buf.copy_(bk.host_buf, non_blocking=True)
        bk.copied.record()
        bk.graph.replay()
        if return_hidden:
            return bk.logits[:n], bk.hidden[:n].clone()
        return bk.logits[:n]


def slots_for(tables: list[list[int]], starts: list[int], counts: list[int], block_size: int) -> np.ndarray:
    """Cache slots of ``counts[i]`` consecutive positions from ``starts[i]`` of each sequence (vectorised)."""
    out = []
    for t, s, c in zip(tables, starts, counts):
        pos = np.arange(s, s + c, dtype=np.int64)
        out.append(np.asarray(t, dtype=np.int64)[pos // block_size] * block_size + pos % block_size)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


# ------------------------------------------------------------------------------------ speculative (multi-token) steps
def multi_token_layout(model: torch.nn.Module, tokens_per_seq: int) -> str | None:
    """How a step of ``tokens_per_seq`` new tokens per sequence is laid out for a captured graph, or None when the
    model's layers cannot run such a step without host reads (it then runs eagerly):

    * ``"rows"``: every token is its own decode row (``is_prefill=False``, one query, context = its position + 1,
      its sequence's block table). Right when each attention reads every key from the cache after the layer wrote
      them all: MLA (``write_latent_static`` then the decode kernel over the paged latents), and any one-token step.
      Not for GQA's Triton decode with more than one token per sequence: that kernel writes a row's own K/V inside
      the launch that the sequence's later rows read (a race), so GQA takes
    * ``"varlen"``: the prefill metadata with a fixed ``cu_seqlens_q`` (``tokens_per_seq`` per sequence) and
      ``max_seqlen_q = tokens_per_seq``: the Triton cache write then the varlen paged kernel, whose grid depends only
      on those (no host reads).
    Gated DeltaNet layers (Qwen3-Next, Qwen3.5: GQA full attention beside them) take ``"varlen"``: the bucket then
    also carries each sequence's state slot, fresh flag and real token count (``StateMetadata.tokens_per_seq``), and
    the layer runs its one-token decode op once per token slot (no host reads; :func:`has_recurrent_state`).
    * None: a model mixing MLA and GQA attention (none exists), or Gated DeltaNet beside MLA (none exists).

    Each layer says which layouts it computes correctly (``LayerKind.step_graph_layouts``); the step takes one that
    every layer accepts, "rows" when both are."""
    layouts = set(STEP_LAYOUTS)
    for layer in layer_kinds(model):
        layouts &= layer.step_graph_layouts(tokens_per_seq)
    return "rows" if "rows" in layouts else ("varlen" if "varlen" in layouts else None)


def has_recurrent_state(model: torch.nn.Module) -> bool:
    """Whether the model has layers holding a per-request state (a step's buckets then carry state slots)."""
    return any(layer.holds_request_state() for layer in layer_kinds(model))


def _cuda_capture(pool, fn):
    """Capture ``fn()`` in a CUDA graph on ``pool``: ``(its static outputs, replay)``."""
    graph = torch.cuda.CUDAGraph()
    mode = "thread_local" if distributed.tp_size() > 1 else "global"  # see DecodeGraphs._capture
    with torch.cuda.graph(graph, pool=pool, capture_error_mode=mode):
        out = fn()
    return out, graph.replay


class _StepBucket:
    """Static buffers of one batch bucket: ``batch`` sequences of ``q`` token slots each (``T = batch * q`` rows)."""

    def __init__(self, batch: int, q: int, width: int, layout: str, device: torch.device,
                 hidden: tuple[int, torch.dtype] | None, with_state: bool = False, checkpoints=None):
        self.batch, self.q, self.width = batch, q, width
        self.with_state = with_state
        T = batch * q
        R = T if layout == "rows" else batch  # rows of context lengths / block tables
        B = batch if with_state else 0  # recurrent layers: each sequence's state slot, fresh flag (0/1), real tokens
        tab0 = 4 * T + R
        n = tab0 + R * width + 3 * B
        cuda = torch.device(device).type == "cuda"
        self.device_buf = torch.zeros(n, dtype=torch.int64, device=device)
        self.host_buf = torch.zeros(n, dtype=torch.int64, pin_memory=cuda)
        h, d = self.host_buf.numpy(), self.device_buf
        self.h_ids, self.h_pos, self.h_slot, self.h_dst = (h[i * T:(i + 1) * T] for i in range(4))
        self.h_ctx = h[4 * T:tab0]
        self.h_tab = h[tab0:tab0 + R * width].reshape(R, width)
        self.ids, self.pos, self.slot, self.dst = (d[i * T:(i + 1) * T] for i in range(4))
        self.ctx = d[4 * T:tab0]
        self.tab = d[tab0:tab0 + R * width].view(R, width)
        step = 1 if layout == "rows" else q
        cu = torch.arange(0, R * step + 1, step, dtype=torch.int32, device=device)
        state = None
        if with_state:  # Gated DeltaNet: the fixed-shape multi-token path (StateMetadata.tokens_per_seq), varlen only
            from ...state_cache import StateMetadata

            st = tab0 + R * width
            self.h_state, self.h_fresh, self.h_lens = (h[st + i * B:st + (i + 1) * B] for i in range(3))
            self.state_slot, self.fresh_i64, self.lens = (d[st + i * B:st + (i + 1) * B] for i in range(3))
            self.fresh = torch.zeros(B, dtype=torch.bool, device=device)  # refreshed inside the graph
            state = StateMetadata(cu, self.state_slot, self.fresh, tokens_per_seq=q, seq_lens=self.lens,
                                  checkpoints=checkpoints)
        self.meta = AttentionMetadata(
            is_prefill=layout == "varlen", slot_mapping=self.slot, cu_seqlens_q=cu, context_lens=self.ctx,
            block_tables=self.tab, max_seqlen_q=q if layout == "varlen" else 1, state=state,
        )
        # A draft head's static input: the target's hidden states of the fed tokens, one row per token slot.
        self.hidden_in = torch.zeros(T, hidden[0], dtype=hidden[1], device=device) if hidden else None
        self.copied = torch.cuda.Event() if cuda else None
        self.out: torch.Tensor | None = None
        self.replay = None


class StepGraphs:
    """Graphs of speculative steps: up to ``tokens_per_seq`` new tokens for each of up to a bucket's sequences
    (the target's verify step: K + 1; the MTP draft: K + 1 for the step that settles the accepted run, 1 for a
    chained draft step), one graph per batch bucket, captured lazily like :class:`DecodeGraphs`.

    A step with fewer tokens in some sequence (fewer drafts, a prompt chunk of a few tokens) pads that sequence's
    slots: padding tokens write nothing (slot -1). ``"rows"`` padding rows attend their own position only (context
    1); ``"varlen"`` padding tokens sit after the sequence's real ones (causal: no real token sees them) with the
    last real position for RoPE and a context of ``start + tokens_per_seq`` (the block-table width covers
    ``max_model_len + tokens_per_seq``; the columns past a sequence's blocks are read by padding rows only). Padding
    sequences: context ``tokens_per_seq`` (varlen) or 1 (rows), block 0, never written. A model with Gated DeltaNet
    layers (varlen only) also gets each sequence's state slot (``run``'s ``state_slots``; -1 for padding sequences),
    fresh flag (``start_pos == 0``) and real token count: its states advance in place over the real tokens only;
    ``checkpoints`` (``StatePool.checkpoints``) also receive each sequence's state after each real token.

    ``hidden``: ``(hidden_size, dtype)`` for a draft head whose forward also reads the target's hidden states
    (``bind_hidden_states``): a static input buffer, bound before capture, filled before each replay.
    ``run`` returns the model's output (its final hidden states) of the real tokens in work order, gathered out of
    the static output (a new tensor: the next replay of any graph on the shared pool overwrites the static one).
    ``capture(fn) -> (outputs, replay)`` is the seam: CUDA-graph capture by default, a recorded callable in the CPU
    tests (tests/test_speculative.py).

    Device-resident drafting (runtime/engine/speculative.py, greedy steps): ``head=True`` also captures the LM head
    and the argmax of every token slot, and keeps the token ids the replay fed (``run(..., head=True)`` returns
    ``(hidden, argmax, fed ids)`` of the real tokens); ``chain``: a device buffer that token ids ``-1 - r`` name row
    ``r`` of (``runtime/ops/tokens.py``), so a step's input tokens can be the previous graph's argmax without a
    device-to-host read."""

    def __init__(self, model: torch.nn.Module, device: torch.device, *, tokens_per_seq: int, layout: str,
                 max_num_seqs: int, width: int, block_size: int, buckets: list[int] | None = None,
                 hidden: tuple[int, torch.dtype] | None = None, pool=None, capture=None, warmup: int = 2,
                 head: bool = False, chain: torch.Tensor | None = None, checkpoints=None):
        if layout not in ("rows", "varlen"):
            raise ValueError(f"StepGraphs layout {layout!r}: expected 'rows' or 'varlen'")
        self.with_state = has_recurrent_state(model)
        if self.with_state and layout != "varlen":
            raise ValueError(f"StepGraphs: a model with per-request state layers needs the 'varlen' layout, not "
                             f"{layout!r}")
        self.model, self.device = model, torch.device(device)
        self.q, self.layout, self.width, self.block_size = tokens_per_seq, layout, width, block_size
        self.hidden, self.checkpoints = hidden, checkpoints
        self.buckets = sorted(set(buckets or default_decode_buckets(max_num_seqs)))
        self._buckets: dict[int, _StepBucket] = {}
        self.pool = pool
        self._capture_fn = capture
        self.warmup = warmup
        self.head, self.chain = head, chain
        self.captures = 0
        self.replays = 0

    def capture_all(self) -> None:
        """Capture every batch bucket now (``LLM.warmup``): a bucket first met mid-generation -- a chained draft
        step over fewer active sequences, a batch shrinking as requests finish -- would otherwise stall that step
        for its warm-up forwards and capture (seen in bench/mtp.py: K = 2 at batch 8 ran at 0.39x plain decoding
        with its buckets captured inside the timed call)."""
        for b in self.buckets:
            if b not in self._buckets:
                self._capture(b)

    def accepts(self, work) -> bool:
        """Whether a step fits a bucket: at most the largest bucket's sequences, 1..tokens_per_seq tokens each."""
        return bool(work) and len(work) <= self.buckets[-1] and all(1 <= len(w.token_ids) <= self.q for w in work)

    def _forward(self, bk: _StepBucket):
        if bk.hidden_in is not None:
            self.model.bind_hidden_states(bk.hidden_in)
        if bk.with_state:  # bool view of the copied 0/1 flags, computed inside the graph
            torch.ne(bk.fresh_i64, 0, out=bk.fresh)
        ids = bk.ids if self.chain is None else chain_token_ids(bk.ids, self.chain)
        hidden = self.model(ids, bk.pos, bk.meta)
        if not self.head:
            return hidden
        return hidden, self.model.compute_logits(hidden).argmax(-1), ids

    def _capture(self, batch: int) -> _StepBucket:
        bk = _StepBucket(batch, self.q, self.width, self.layout, self.device, self.hidden, self.with_state,
                         self.checkpoints)
        self._fill(bk, [], [])
        bk.device_buf.copy_(bk.host_buf)
        capture = self._capture_fn
        if capture is None:
            for _ in range(self.warmup):  # Triton compilation, per-shape GEMM / MoE path choice, outside the capture
                self._forward(bk)
            torch.cuda.synchronize(self.device)
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            pool = self.pool
            capture = lambda fn: _cuda_capture(pool, fn)  # noqa: E731
        bk.out, bk.replay = capture(lambda: self._forward(bk))
        if self._capture_fn is None:
            torch.cuda.synchronize(self.device)
        self._buckets[batch] = bk
        self.captures += 1
        return bk

    def _fill(self, bk: _StepBucket, work, tables, state_slots=None) -> int:
        """Host buffers of one step (padding everywhere else); returns the number of real tokens. Python lists and
        one numpy assignment per buffer (per-item numpy calls cost more than the step's few dozen tokens).
        ``state_slots``: each work item's state-pool slot (models with recurrent layers)."""
        if bk.with_state:
            n = len(work)
            bk.h_state[:] = -1  # padding sequences: no state read or written
            bk.h_fresh[:] = 0
            bk.h_lens[:] = 0
            if n:
                bk.h_state[:n] = state_slots
                bk.h_fresh[:n] = [int(w.start_pos == 0) for w in work]
                bk.h_lens[:n] = [len(w.token_ids) for w in work]
        Q, bs, rows = bk.q, self.block_size, self.layout == "rows"
        dst, ids, pos, slot, ctx = [], [], [], [], []
        pad_at, pad_pos = [], []  # varlen: padding slots of real sequences (RoPE at the last real position)
        for i, (w, t) in enumerate(zip(work, tables)):
            L, s, a = len(w.token_ids), w.start_pos, i * Q
            dst.extend(range(a, a + L))
            ids.extend(w.token_ids)
            p = range(s, s + L)
            pos.extend(p)
            slot.extend(t[x // bs] * bs + x % bs for x in p)
            if rows:
                ctx.extend(range(s + 1, s + L + 1))
                bk.h_tab[a:a + L, :len(t)] = t
            else:
                ctx.append(s + Q)
                bk.h_tab[i, :len(t)] = t
                pad_at.extend(range(a + L, a + Q))
                pad_pos.extend([s + L - 1] * (Q - L))
        bk.h_ids[:] = 0
        bk.h_pos[:] = 0
        bk.h_slot[:] = -1
        bk.h_ctx[:] = 1 if rows else Q
        m = len(dst)
        if m:
            bk.h_dst[:m] = dst
            d = bk.h_dst[:m]
            bk.h_ids[d] = ids
            bk.h_pos[d] = pos
            bk.h_slot[d] = slot
            if rows:
                bk.h_ctx[d] = ctx
            else:
                bk.h_ctx[:len(ctx)] = ctx
                if pad_at:
                    bk.h_pos[pad_at] = pad_pos
        return m

    def run(self, work, tables: list[list[int]], hidden: torch.Tensor | None = None,
            state_slots: list[int] | None = None, head: bool = False):
        """Final hidden states ``[sum of tokens, hidden_size]`` of ``work`` (its sequences' ``tables``; ``hidden``:
        the draft head's input rows, one per fed token in work order; ``state_slots``: each sequence's state-pool
        slot, for a model with recurrent layers, whose states the replay advances in place). ``head`` (graphs built
        with ``head=True``): ``(hidden, argmax, fed ids)``, each in work order, all on the device."""
        if self.with_state and (state_slots is None or len(state_slots) != len(work)):
            raise ValueError(f"StepGraphs.run: a model with recurrent layers needs one state slot per work item "
                             f"({len(work)}), got {state_slots!r}")
        n = len(work)
        batch = next(b for b in self.buckets if n <= b)
        bk = self._buckets.get(batch) or self._capture(batch)
        if bk.copied is not None:
            bk.copied.synchronize()  # the previous step's copy has left the pinned buffer
        m = self._fill(bk, work, tables, state_slots)
        bk.device_buf.copy_(bk.host_buf, non_blocking=True)
        if bk.copied is not None:
            bk.copied.record()
        dst = bk.dst[:m]
        if bk.hidden_in is not None:
            bk.hidden_in.index_copy_(0, dst, hidden.to(bk.hidden_in.dtype))
        bk.replay()
        self.replays += 1
        if not self.head:
            return bk.out.index_select(0, dst)
        out = tuple(t.index_select(0, dst) for t in bk.out)
        return out if head else out[0]
