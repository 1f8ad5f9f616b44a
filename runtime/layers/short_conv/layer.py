"""LFM2 short convolution for the rocm target (ATOM style: flattened tokens).

``ShortConv`` is transformers' ``Lfm2ShortConv`` over a batch of flattened tokens ``[num_tokens, hidden]`` from many
sequences, each continuing its own conv history (the last ``K - 1`` conv inputs) held in a
:class:`~modelgen.runtime.state_cache.StatePool` slot -- the same pool Gated DeltaNet uses, with no recurrent part.

    B, C, x = in_proj(h).chunk(3);  y = C * conv(B * x);  out = out_proj(y)

A decode-only step runs ``ops.conv_decode`` batched with no host reads (capturable), a fixed-shape window of q tokens
per sequence (speculative verify) the same step once per token slot; any other mix of prefill and decode segments is
routed on the host, ``ops.conv_prefill`` one sequence at a time. Sequences whose slot is ``PAD_SLOT`` and tokens past
``cu_seqlens[-1]`` produce zeros and never touch any state.

Tensor parallelism: the conv is depthwise, so ranks split the hidden channels. ``in_proj`` stacks ``[B | C | x]``
(each ``hidden`` rows), so a rank takes its rows of each third (:class:`ChunkedColumnParallelLinear`); ``conv``
and ``out_proj``'s input are split by the same channels.
"""
from __future__ import annotations

import torch
from torch import nn

from ... import distributed as dist
from ...state_cache import PAD_SLOT, StateMetadata, StateSpec
from ..kind import LayerKind
from ..linear import ColumnParallelLinear, RowParallelLinear, _check_shape
from . import ops


def _load_chunks(param: torch.Tensor, loaded: torch.Tensor, chunks: int, what: str) -> None:
    """Copy this rank's rows of each of ``chunks`` equal row blocks of ``loaded`` into ``param``, block after block."""
    rank, world = dist.tp_rank(), dist.tp_size()
    local = param.shape[0] // chunks
    _check_shape(param, (param.shape[0] * world, *param.shape[1:]), loaded, what)
    for j in range(chunks):
        param.data.narrow(0, j * local, local).copy_(loaded.narrow(0, (j * world + rank) * local, local))


class ChunkedColumnParallelLinear(ColumnParallelLinear):
    """Column-parallel GEMM whose checkpoint rows are ``chunks`` equal blocks (LFM2 ``in_proj``: B, C, x), each split
    across ranks so a rank's output is ``[B_r | C_r | x_r]`` and ``chunk(3)`` still applies locally."""

    def __init__(self, in_features: int, chunk_size: int, chunks: int, bias: bool):
        dist.divide(chunk_size, dist.tp_size(), "rows of each in_proj chunk")
        self.chunks = chunks
        super().__init__(in_features, chunk_size * chunks, bias)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        what = "bias" if param.dim() == 1 else "weight"
        _load_chunks(param, loaded, self.chunks, f"chunked column-parallel {what}")


class DepthwiseConv(nn.Module):
    """HF's ``conv`` (``nn.Conv1d(D, D, K, groups=D)``): ``weight [D, 1, K]``, optional ``bias [D]``; channels
    sharded across ranks."""

    def __init__(self, channels: int, kernel: int, bias: bool):
        super().__init__()
        local = dist.divide(channels, dist.tp_size(), "conv channels")
        self.weight = nn.Parameter(torch.empty(local, 1, kernel), requires_grad=False)
        self.weight.weight_loader = self.weight_loader
        self.bias = None
        if bias:
            self.bias = nn.Parameter(torch.empty(local), requires_grad=False)
            self.bias.weight_loader = self.weight_loader

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        _load_chunks(param, loaded, 1, "conv " + ("bias" if param.dim() == 1 else "weight"))


class ShortConv(LayerKind):
    cache_kind = StateSpec.kind

    def __init__(self, hidden_size: int, conv_kernel: int, bias: bool, layer_name: str = ""):
        super().__init__()
        if conv_kernel < 2:
            raise ValueError(f"ShortConv: conv_L_cache must be at least 2 (a kernel of 1 keeps no state), "
                             f"got {conv_kernel}")
        self.layer_name, self.conv_kernel = layer_name, conv_kernel
        self.channels = dist.divide(hidden_size, dist.tp_size(), "hidden_size")  # per rank
        self.in_proj = ChunkedColumnParallelLinear(hidden_size, hidden_size, 3, bias)
        self.conv = DepthwiseConv(hidden_size, conv_kernel, bias)
        self.out_proj = RowParallelLinear(hidden_size, hidden_size, bias)
        self.conv_state: torch.Tensor | None = None  # [num_slots, channels, K-1], bound by the engine

    # ---------------------------------------------------------------------------------------------------- cache
    def state_spec(self) -> StateSpec:
        """This rank's slot of this layer: the conv inputs before the next token."""
        return StateSpec(
            name=self.layer_name,
            conv_shape=(self.channels, self.conv_kernel - 1),
            conv_dtype=self.in_proj.weight.dtype,  # transformers keeps the conv state in the projection's dtype
        )

    def bind_state(self, conv_state: torch.Tensor, recurrent_state: torch.Tensor | None = None) -> None:
        self.state_spec().check_bound(self.layer_name or "ShortConv", conv_state=conv_state)
        self.conv_state = conv_state

    # ------------------------------------------------------------------------- what the engine asks (LayerKind)
    def step_graph_layouts(self, tokens_per_seq: int) -> frozenset[str]:
        # The fixed-shape multi-token path (StateMetadata.tokens_per_seq) reads each sequence's window of q slots.
        return frozenset({"varlen"})

    def sequence_parallel_refusal(self) -> str | None:
        return "its state writes need every token of a sequence on one rank"

    # -------------------------------------------------------------------------------------------------- forward
    def forward(self, hidden_states: torch.Tensor, meta: StateMetadata) -> torch.Tensor:
        """``hidden_states [num_tokens, hidden]`` -> ``[num_tokens, hidden]``; reads and advances each sequence's
        conv history."""
        if self.conv_state is None:
            raise RuntimeError(f"{self.layer_name or 'ShortConv'}: no state bound (call bind_state first)")
        bx, c = ops.gated_input(self.in_proj(hidden_states))
        weight, bias = self.conv.weight.squeeze(1), self.conv.bias
        if meta.decode_only:
            n = meta.state_slots.shape[0]
            y = self._decode_rows(bx[:n], weight, bias, meta.state_slots, meta.fresh)
            if n < bx.shape[0]:  # padding tokens past the batch
                y = torch.cat([y, y.new_zeros(bx.shape[0] - n, y.shape[1])])
        elif meta.tokens_per_seq:
            y = self._window_rows(bx, weight, bias, meta)
        else:
            y = self._mixed_eager(bx, weight, bias, meta)
        return self.out_proj(c * y)

    def _decode_rows(self, bx, weight, bias, slots: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
        """One token per row (slot -1: padding row, zeros out, no state write), no host reads."""
        real = slots >= 0
        y, new = ops.conv_decode(bx, weight, bias, ops.read_state_rows(self.conv_state, slots, real & ~fresh))
        ops.write_state_rows(self.conv_state, slots, real, new)
        return y * real.to(y.dtype).unsqueeze(-1)

    def _window_rows(self, bx, weight, bias, meta: StateMetadata) -> torch.Tensor:
        """A fixed-shape step of ``q = meta.tokens_per_seq`` token slots per sequence with no host reads (a graphed
        speculative verify step): the decode step once per slot column j, in order, each advancing the states the
        next reads. Column j of a sequence with fewer real tokens is a padding row (no state write); ``fresh`` holds
        for the first column only."""
        q, R = meta.tokens_per_seq, meta.state_slots.shape[0]
        if bx.shape[0] != R * q:
            raise ValueError(f"{self.layer_name or 'ShortConv'}: {bx.shape[0]} tokens for {R} sequences of {q} "
                             "slots (tokens_per_seq)")
        x = bx.view(R, q, -1)
        outs = []
        for j in range(q):
            slots = torch.where(meta.seq_lens > j, meta.state_slots, torch.full_like(meta.state_slots, PAD_SLOT))
            fresh = meta.fresh if j == 0 else torch.zeros_like(meta.fresh)
            outs.append(self._decode_rows(x[:, j].contiguous(), weight, bias, slots, fresh))
        return torch.stack(outs, 1).reshape(R * q, -1)

    def _mixed_eager(self, bx, weight, bias, meta: StateMetadata) -> torch.Tensor:
        """Any mix of prefill segments and decode tokens (host-side routing)."""
        cu, slots, fresh = meta.host()
        live = [i for i in range(len(slots)) if slots[i] != PAD_SLOT and cu[i + 1] > cu[i]]
        live_slots = [slots[i] for i in live]
        if len(set(live_slots)) != len(live_slots):
            raise ValueError(f"{self.layer_name or 'ShortConv'}: two sequences of one batch share a state slot "
                             f"({live_slots})")
        y = bx.new_zeros(bx.shape)  # padding tokens stay zero
        for i in live:
            s, e, slot = cu[i], cu[i + 1], slots[i]
            state = self.conv_state.new_zeros(self.conv_state.shape[1:]) if fresh[i] else self.conv_state[slot]
            y[s:e], new = ops.conv_prefill(bx[s:e], weight, bias, state)
            self.conv_state[slot] = new.to(self.conv_state.dtype)
        return y
