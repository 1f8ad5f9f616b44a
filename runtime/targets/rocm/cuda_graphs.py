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
            from ...layers.gated_deltanet import StateMetadata

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
                 block_size: int, buckets: list[int] | None = None, with_state: bool = False):
        self.model, self.device = model, device
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
        hidden = self.model(bk.ids, bk.pos, bk.meta)
        return self.model.compute_logits(hidden), hidden

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
