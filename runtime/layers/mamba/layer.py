"""Mamba-1 mixer for the rocm target (ATOM style: flattened tokens).

``MambaMixer`` is transformers' ``MambaMixer`` (and, with ``use_rms_norm``, ``JambaMambaMixer``) over a batch of
flattened tokens ``[num_tokens, hidden]`` from many sequences, each continuing its own per-request state held in a
:class:`~modelgen.runtime.state_cache.StatePool` slot: the conv history ``[D, K-1]`` and the SSM state ``[D, N]``.

    x, z = in_proj(h).chunk(2)                        # D = intermediate channels each
    x = silu(causal depthwise conv1d(x))              # conv state: the last K-1 inputs
    dt, B, C = split(x_proj(x), [rank, N, N])         # Jamba: RMSNorm on each (dt_layernorm, b/c_layernorm)
    dt = softplus(dt_proj.weight @ dt + dt_proj.bias)
    y = selective_scan(x, dt, A = -exp(A_log), B, C)  # SSM state h [D, N]
    out = out_proj((y + D * x) * silu(z))

A decode-only step runs the shape-static ops batched with no host reads (capturable), a fixed-shape window of q
tokens per sequence (speculative verify) the decode step once per token slot; any other mix of prefill and decode
segments is routed on the host, each sequence through ``ops.conv_prefill`` and the chunked ``ops.selective_scan``.
Sequences whose slot is ``PAD_SLOT`` and tokens past ``cu_seqlens[-1]`` never touch any state.

Tensor parallelism (as vLLM's ``MambaMixer``): the D channels are split across ranks -- ``in_proj`` (each of its x
and z halves), ``conv1d``, ``dt_proj``'s output, ``A_log``, ``D`` and ``out_proj``'s input; ``x_proj`` is
row-parallel (its dt / B / C need every channel: one all-reduce), so dt, B, C and their norms are whole on every rank.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ... import distributed as dist
from ...state_cache import PAD_SLOT, StateMetadata, StateSpec
from ..kind import LayerKind
from ..linear import ColumnParallelLinear, MergedColumnParallelLinear, RowParallelLinear, _check_shape
from ..norm import RMSNorm
from . import ops


class InProjLinear(MergedColumnParallelLinear):
    """``in_proj`` ``[x | z]`` (two halves of D rows each, one checkpoint tensor): each rank takes its rows of both
    halves, so ``chunk(2)`` still splits x from z locally."""

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        if shard_id is not None:
            return super().weight_loader(param, loaded, shard_id)
        half = self.output_sizes[0]
        _check_shape(param, (2 * half, *param.shape[1:]), loaded, "in_proj")
        for j in range(2):
            super().weight_loader(param, loaded.narrow(0, j * half, half), j)


def _channel_param(*shape: int) -> nn.Parameter:
    """A tensor whose dim 0 is the D channels (``A_log [D, N]``, ``D [D]``, ``conv1d.weight [D, 1, K]``), this rank's
    rows of it."""
    local = dist.divide(shape[0], dist.tp_size(), "mamba intermediate channels")
    p = nn.Parameter(torch.empty(local, *shape[1:]), requires_grad=False)

    def load(param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        _check_shape(param, shape, loaded, "mamba channel tensor")
        param.data.copy_(loaded.narrow(0, dist.tp_rank() * local, local))

    p.weight_loader = load
    return p


class DepthwiseConv1d(nn.Module):
    """HF's ``conv1d`` (``nn.Conv1d(D, D, K, groups=D)``): ``weight [D, 1, K]``, optional ``bias [D]``."""

    def __init__(self, channels: int, kernel: int, bias: bool):
        super().__init__()
        self.weight = _channel_param(channels, 1, kernel)
        self.bias = _channel_param(channels) if bias else None


class MambaMixer(LayerKind):
    cache_kind = StateSpec.kind

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        state_size: int,
        conv_kernel: int,
        time_step_rank: int,
        conv_bias: bool,
        proj_bias: bool,
        rms_norm_eps: float | None = None,
        layer_name: str = "",
        state_dtype: torch.dtype = torch.float32,
        chunk_size: int = 16,
    ):
        super().__init__()
        if conv_kernel < 2:
            raise ValueError(f"MambaMixer: the conv kernel must be at least 2 (a kernel of 1 keeps no state), "
                             f"got {conv_kernel}")
        self.layer_name, self.conv_kernel, self.state_size = layer_name, conv_kernel, state_size
        self.time_step_rank, self.state_dtype, self.chunk_size = time_step_rank, state_dtype, chunk_size
        self.channels = dist.divide(intermediate_size, dist.tp_size(), "mamba intermediate size")  # per rank
        self.in_proj = InProjLinear(hidden_size, [intermediate_size, intermediate_size], proj_bias)
        self.conv1d = DepthwiseConv1d(intermediate_size, conv_kernel, conv_bias)
        self.x_proj = RowParallelLinear(intermediate_size, time_step_rank + 2 * state_size, bias=False)
        self.dt_proj = ColumnParallelLinear(time_step_rank, intermediate_size, bias=True)
        self.A_log = _channel_param(intermediate_size, state_size)
        self.D = _channel_param(intermediate_size)
        self.out_proj = RowParallelLinear(intermediate_size, hidden_size, proj_bias)
        if rms_norm_eps is not None:  # JambaMambaMixer: RMSNorms on dt, B and C (replicated: they follow x_proj's sum)
            self.dt_layernorm = RMSNorm(time_step_rank, rms_norm_eps)
            self.b_layernorm = RMSNorm(state_size, rms_norm_eps)
            self.c_layernorm = RMSNorm(state_size, rms_norm_eps)
        self.use_rms_norm = rms_norm_eps is not None
        self.conv_state: torch.Tensor | None = None  # [num_slots, channels, K-1], bound by the engine
        self.ssm_state: torch.Tensor | None = None  # [num_slots, channels, N]

    # ---------------------------------------------------------------------------------------------------- cache
    def state_spec(self) -> StateSpec:
        """This rank's slot of this layer: the conv inputs before the next token and the SSM state (float32)."""
        return StateSpec(
            name=self.layer_name,
            conv_shape=(self.channels, self.conv_kernel - 1),
            conv_dtype=self.in_proj.weight.dtype,  # transformers keeps the conv state in the activations' dtype
            recurrent_shape=(self.channels, self.state_size),
            recurrent_dtype=self.state_dtype,
        )

    def bind_state(self, conv_state: torch.Tensor, ssm_state: torch.Tensor) -> None:
        self.state_spec().check_bound(self.layer_name or "MambaMixer", conv_state=conv_state, ssm_state=ssm_state)
        self.conv_state, self.ssm_state = conv_state, ssm_state

    # ------------------------------------------------------------------------- what the engine asks (LayerKind)
    def step_graph_layouts(self, tokens_per_seq: int) -> frozenset[str]:
        # The fixed-shape multi-token path (StateMetadata.tokens_per_seq) reads each sequence's window of q slots.
        return frozenset({"varlen"})

    def sequence_parallel_refusal(self) -> str | None:
        return "its state writes need every token of a sequence on one rank"

    def linears_read_as_matrix(self) -> list[nn.Module]:
        # dt_proj's weight is applied without its bias (added in float32 before the softplus, as transformers does).
        return [self.dt_proj]

    # -------------------------------------------------------------------------------------------------- forward
    def ssm_inputs(self, xc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Activated conv output ``[T, D]`` -> (``dt [T, D]`` float32 after the softplus, ``B, C [T, N]``)."""
        dt, B, C = self.x_proj(xc).split([self.time_step_rank, self.state_size, self.state_size], dim=-1)
        if self.use_rms_norm:
            dt, B, C = self.dt_layernorm(dt.contiguous()), self.b_layernorm(B.contiguous()), self.c_layernorm(
                C.contiguous())
        return ops.discretize_dt(F.linear(dt, self.dt_proj.weight), self.dt_proj.bias), B, C

    def forward(self, hidden_states: torch.Tensor, meta: StateMetadata) -> torch.Tensor:
        """``hidden_states [num_tokens, hidden]`` -> ``[num_tokens, hidden]``; reads and advances each sequence's
        conv and SSM states."""
        if self.conv_state is None:
            raise RuntimeError(f"{self.layer_name or 'MambaMixer'}: no state bound (call bind_state first)")
        x, z = self.in_proj(hidden_states).chunk(2, dim=-1)
        A = -torch.exp(self.A_log.float())
        if meta.decode_only:
            n = meta.state_slots.shape[0]
            y, xc = self._static_rows(x[:n], A, meta.state_slots, meta.fresh)
            if n < x.shape[0]:  # padding tokens past the batch
                pad = x.shape[0] - n
                y, xc = torch.cat([y, y.new_zeros(pad, y.shape[1])]), torch.cat([xc, xc.new_zeros(pad, xc.shape[1])])
        elif meta.tokens_per_seq:
            y, xc = self._window_rows(x, A, meta)
        else:
            y, xc = self._mixed_eager(x, A, meta)
        return self.out_proj(ops.gated_output(y, xc, self.D, z, hidden_states.dtype))

    def _static_rows(self, x, A, slots: torch.Tensor, fresh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One token per row (slot -1: padding row, zeros out, no state write), no host reads: the neuron decode
        bucket's ops."""
        rows = torch.arange(x.shape[0], device=x.device)
        seq_ids = torch.where(slots >= 0, rows, torch.full_like(rows, -1))
        weight, bias = self.conv1d.weight.squeeze(1), self.conv1d.bias
        xc = ops.conv_static(x, weight, bias, self.conv_state, seq_ids, slots, fresh, decode=True)
        dt, B, C = self.ssm_inputs(xc)
        y = ops.scan_static(xc, dt, A, B, C, self.ssm_state, seq_ids, slots, fresh, decode=True)
        return y, xc

    def _window_rows(self, x, A, meta: StateMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        """A fixed-shape step of ``q = meta.tokens_per_seq`` token slots per sequence with no host reads (a graphed
        speculative verify step): the decode step once per slot column j, in order, each advancing the states the
        next reads. Column j of a sequence with fewer real tokens is a padding row (no state write); ``fresh`` holds
        for the first column only."""
        q, R = meta.tokens_per_seq, meta.state_slots.shape[0]
        if x.shape[0] != R * q:
            raise ValueError(f"{self.layer_name or 'MambaMixer'}: {x.shape[0]} tokens for {R} sequences of {q} "
                             "slots (tokens_per_seq)")
        xs = x.view(R, q, -1)
        ys, xcs = [], []
        for j in range(q):
            slots = torch.where(meta.seq_lens > j, meta.state_slots, torch.full_like(meta.state_slots, PAD_SLOT))
            fresh = meta.fresh if j == 0 else torch.zeros_like(meta.fresh)
            y, xc = self._static_rows(xs[:, j].contiguous(), A, slots, fresh)
            ys.append(y)
            xcs.append(xc)
        return torch.stack(ys, 1).reshape(R * q, -1), torch.stack(xcs, 1).reshape(R * q, -1)

    def _mixed_eager(self, x, A, meta: StateMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        """Any mix of prefill segments and decode tokens (host-side routing), one sequence at a time."""
        cu, slots, fresh = meta.host()
        live = [i for i in range(len(slots)) if slots[i] != PAD_SLOT and cu[i + 1] > cu[i]]
        live_slots = [slots[i] for i in live]
        if len(set(live_slots)) != len(live_slots):
            raise ValueError(f"{self.layer_name or 'MambaMixer'}: two sequences of one batch share a state slot "
                             f"({live_slots})")
        weight, bias = self.conv1d.weight.squeeze(1), self.conv1d.bias
        xc = x.new_zeros(x.shape)  # padding tokens stay zero
        y = x.new_zeros(x.shape, dtype=torch.float32)
        for i in live:
            s, e, slot = cu[i], cu[i + 1], slots[i]
            conv0 = self.conv_state.new_zeros(self.conv_state.shape[1:]) if fresh[i] else self.conv_state[slot]
            h0 = self.ssm_state.new_zeros(self.ssm_state.shape[1:]) if fresh[i] else self.ssm_state[slot]
            xc[s:e], conv1 = ops.conv_prefill(x[s:e], weight, bias, conv0)
            dt, B, C = self.ssm_inputs(xc[s:e])
            ys, h1 = ops.selective_scan(h0.unsqueeze(0), xc[s:e].unsqueeze(0), dt.unsqueeze(0), A, B.unsqueeze(0),
                                        C.unsqueeze(0), self.chunk_size)
            y[s:e] = ys[0]
            self.conv_state[slot] = conv1.to(self.conv_state.dtype)
            self.ssm_state[slot] = h1[0].to(self.ssm_state.dtype)
        return y, xc
