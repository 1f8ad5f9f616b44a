"""MiniMax lightning attention for the rocm target (ATOM style: flattened tokens).

``LightningAttention`` is transformers' ``MiniMaxLightningAttention`` over a batch of flattened tokens
``[num_tokens, hidden]`` from many sequences, each continuing its own linear-attention state ``[heads, D, D]`` held
in a :class:`~modelgen.runtime.state_cache.StatePool` slot (the pool Gated DeltaNet uses, with no conv part).

    q, k, v = split(silu(qkv_proj(h)));  o = lightning(q, k, v);  out = out_proj(sigmoid(output_gate(h)) * norm(o))

A decode-only step runs ``ops.lightning_decode`` batched with no host reads (capturable), a fixed-shape window of q
tokens per sequence (speculative verify) the same step once per token slot; any other mix of prefill and decode
segments is routed on the host, ``ops.lightning_prefill`` one sequence at a time. Sequences whose slot is
``PAD_SLOT`` and tokens past ``cu_seqlens[-1]`` produce zeros and never touch any state.

The checkpoint's ``qkv_proj`` is this layer's ``qkv`` (a spec renames it: ``qkv_proj`` is the fused GQA projection's
name in modelgen's loader, which a hybrid's softmax layers also have).

Tensor parallelism: heads are split across ranks (``qkv`` rows are per head ``[q | k | v]``, so a rank's heads
are one contiguous block; ``output_gate`` by the same heads); the output norm spans every head, its variance
all-reduced (``ShardedProjectionRMSNorm``); ``out_proj`` is row-parallel.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import distributed as dist
from ...state_cache import PAD_SLOT, StateMetadata, StateSpec
from ..kind import LayerKind
from ..linear import ColumnParallelLinear, RowParallelLinear
from ..norm import ShardedProjectionRMSNorm
from . import ops


class LightningAttention(LayerKind):
    cache_kind = StateSpec.kind

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int, block_size: int, layer_idx: int,
                 num_layers: int, norm_eps: float, layer_name: str = ""):
        super().__init__()
        if block_size < 1:
            raise ValueError(f"LightningAttention: block_size must be positive, got {block_size}")
        self.layer_name, self.block_size, self.head_dim = layer_name, block_size, head_dim
        world = dist.tp_size()
        self.num_heads = dist.divide(num_heads, world, "num_attention_heads")  # per rank
        self.qkv = ColumnParallelLinear(hidden_size, 3 * num_heads * head_dim, bias=False)
        self.output_gate = ColumnParallelLinear(hidden_size, num_heads * head_dim, bias=False)
        self.norm = ShardedProjectionRMSNorm(num_heads, head_dim, norm_eps)
        self.out_proj = RowParallelLinear(num_heads * head_dim, hidden_size, bias=False)
        rank = dist.tp_rank()
        slope = ops.slope_rate(num_heads, layer_idx, num_layers)[rank * self.num_heads:(rank + 1) * self.num_heads]
        # Derived from the config, not a checkpoint tensor (HF's slope_rate / *_decay buffers are ignored at load).
        self.register_buffer("slope", slope, persistent=False)
        self.state: torch.Tensor | None = None  # [num_slots, heads, D, D] float32, bound by the engine

    # ---------------------------------------------------------------------------------------------------- cache
    def state_spec(self) -> StateSpec:
        """This rank's slot of this layer: the ``[heads, D, D]`` state after the last token (no conv history)."""
        return StateSpec(
            name=self.layer_name,
            recurrent_shape=(self.num_heads, self.head_dim, self.head_dim),
        )

    def bind_state(self, conv_state: torch.Tensor, recurrent_state: torch.Tensor) -> None:
        self.state_spec().check_bound(self.layer_name or "LightningAttention", recurrent_state=recurrent_state)
        self.state = recurrent_state

    # ------------------------------------------------------------------------- what the engine asks (LayerKind)
    def step_graph_layouts(self, tokens_per_seq: int) -> frozenset[str]:
        # The fixed-shape multi-token path (StateMetadata.tokens_per_seq) reads each sequence's window of q slots.
        return frozenset({"varlen"})

    def sequence_parallel_refusal(self) -> str | None:
        return "its state writes need every token of a sequence on one rank"

    # -------------------------------------------------------------------------------------------------- forward
    def forward(self, hidden_states: torch.Tensor, meta: StateMetadata) -> torch.Tensor:
        """``hidden_states [num_tokens, hidden]`` -> ``[num_tokens, hidden]``; reads and advances each sequence's
        state."""
        if self.state is None:
            raise RuntimeError(f"{self.layer_name or 'LightningAttention'}: no state bound (call bind_state first)")
        q, k, v = ops.split_qkv(F.silu(self.qkv(hidden_states)), self.num_heads, self.head_dim)
        if meta.decode_only:
            n = meta.state_slots.shape[0]
            o = self._decode_rows(q[:n], k[:n], v[:n], meta.state_slots, meta.fresh)
            if n < q.shape[0]:  # padding tokens past the batch
                o = torch.cat([o, o.new_zeros(q.shape[0] - n, *o.shape[1:])])
        elif meta.tokens_per_seq:
            o = self._window_rows(q, k, v, meta)
        else:
            o = self._mixed_eager(q, k, v, meta)
        o = self.norm(o.flatten(1).to(hidden_states.dtype))
        return self.out_proj(torch.sigmoid(self.output_gate(hidden_states)) * o)

    def _decode_rows(self, q, k, v, slots: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
        """One token per row (slot -1: padding row, zeros out, no state write), no host reads."""
        real = slots >= 0
        o, new = ops.lightning_decode(q, k, v, ops.read_state_rows(self.state, slots, real & ~fresh), self.slope)
        ops.write_state_rows(self.state, slots, real, new)
        return o * real.to(o.dtype).view(-1, 1, 1)

    def _window_rows(self, q, k, v, meta: StateMetadata) -> torch.Tensor:
        """A fixed-shape step of ``q = meta.tokens_per_seq`` token slots per sequence with no host reads (a graphed
        speculative verify step): the decode step once per slot column j, in order, each advancing the states the
        next reads. Column j of a sequence with fewer real tokens is a padding row (no state write); ``fresh`` holds
        for the first column only."""
        width, R = meta.tokens_per_seq, meta.state_slots.shape[0]
        if q.shape[0] != R * width:
            raise ValueError(f"{self.layer_name or 'LightningAttention'}: {q.shape[0]} tokens for {R} sequences of "
                             f"{width} slots (tokens_per_seq)")
        q, k, v = (x.reshape(R, width, *x.shape[1:]) for x in (q, k, v))
        outs = []
        for j in range(width):
            slots = torch.where(meta.seq_lens > j, meta.state_slots, torch.full_like(meta.state_slots, PAD_SLOT))
            fresh = meta.fresh if j == 0 else torch.zeros_like(meta.fresh)
            outs.append(self._decode_rows(q[:, j], k[:, j], v[:, j], slots, fresh))
        return torch.stack(outs, 1).reshape(R * width, *outs[0].shape[1:])

    def _mixed_eager(self, q, k, v, meta: StateMetadata) -> torch.Tensor:
        """Any mix of prefill segments and decode tokens (host-side routing)."""
        cu, slots, fresh = meta.host()
        live = [i for i in range(len(slots)) if slots[i] != PAD_SLOT and cu[i + 1] > cu[i]]
        live_slots = [slots[i] for i in live]
        if len(set(live_slots)) != len(live_slots):
            raise ValueError(f"{self.layer_name or 'LightningAttention'}: two sequences of one batch share a state "
                             f"slot ({live_slots})")
        o = q.new_zeros(q.shape, dtype=torch.float32)  # padding tokens stay zero
        for i in live:
            s, e, slot = cu[i], cu[i + 1], slots[i]
            state = self.state.new_zeros(self.state.shape[1:]) if fresh[i] else self.state[slot]
            o[s:e], new = ops.lightning_prefill(q[s:e], k[s:e], v[s:e], state, self.slope, self.block_size)
            self.state[slot] = new.to(self.state.dtype)
        return o
