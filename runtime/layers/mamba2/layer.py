"""The Mamba-2 mixer for the rocm target (ATOM style: flattened tokens).

``Mamba2`` is transformers' ``Mamba2Mixer`` / ``BambaMixer`` over a batch of flattened tokens ``[num_tokens, hidden]``
from many sequences, each continuing its own conv state (the last ``K - 1`` xBC inputs) and SSM state ``[H, P, N]``,
both held in one :class:`~modelgen.runtime.state_cache.StatePool` slot -- the pool Gated DeltaNet and the short conv
use. The math is in ``ops.py``.

A decode-only step runs the recurrent step batched over rows with no host reads (capturable), a fixed-shape window
of q tokens per sequence (speculative verify) the same step once per token slot; any other mix of prefill and decode
segments is routed on the host, the chunked scan one sequence at a time. Sequences whose slot is ``PAD_SLOT`` and
tokens past ``cu_seqlens[-1]`` never touch any state (their output is ``out_proj``'s bias, zero without one).

Tensor parallelism: ranks split the heads, so ``n_groups`` must divide by the world size (a rank holds whole
groups and the heads reading them). ``in_proj`` rows are ``[z | x | B | C | dt]`` (``[I, I, G*N, G*N, H]``), each
part split across ranks (:class:`PartsColumnParallelLinear`); the conv's channels ``[x | B | C]``, ``dt_bias``,
``A_log``, ``D``, the gated norm's weight (its groups stay whole) and ``out_proj``'s input follow.
"""
from __future__ import annotations

import torch
from torch import nn

from ... import distributed as dist
from ...state_cache import PAD_SLOT, StateMetadata, StateSpec, read_state_rows, write_state_rows
from ..kind import LayerKind
from ..linear import ColumnParallelLinear, RowParallelLinear, _check_shape
from . import ops


def _load_parts(param: torch.Tensor, loaded: torch.Tensor, parts: list[int], what: str) -> None:
    """Copy this rank's rows of each part of ``loaded`` (parts stacked on dim 0, each split evenly across ranks) into
    ``param``, one part after the other."""
    rank, world = dist.tp_rank(), dist.tp_size()
    _check_shape(param, (sum(parts), *param.shape[1:]), loaded, what)
    start = offset = 0
    for size in parts:
        local = size // world
        param.data.narrow(0, offset, local).copy_(loaded.narrow(0, start + rank * local, local))
        offset += local
        start += size


class PartsColumnParallelLinear(ColumnParallelLinear):
    """Column-parallel GEMM whose checkpoint rows are consecutive parts (Mamba-2 ``in_proj``: z, x, B, C, dt), each
    split across ranks, so a rank's output is ``[z_r | x_r | B_r | C_r | dt_r]`` and the split applies locally."""

    def __init__(self, in_features: int, parts: list[int], bias: bool):
        for size in parts:
            dist.divide(size, dist.tp_size(), "rows of each in_proj part")
        self.parts = parts
        super().__init__(in_features, sum(parts), bias)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        _load_parts(param, loaded, self.parts, "in_proj " + ("bias" if param.dim() == 1 else "weight"))


def _sharded(parts: list[int], *shape: int) -> nn.Parameter:
    """A parameter holding this rank's rows of ``parts`` (then ``shape``), loaded part by part."""
    local = sum(dist.divide(p, dist.tp_size(), "channels") for p in parts)
    param = nn.Parameter(torch.empty(local, *shape), requires_grad=False)
    param.weight_loader = lambda p, loaded, shard_id=None: _load_parts(p, loaded, parts, f"{len(parts)}-part tensor")
    return param


class DepthwiseConv(nn.Module):
    """HF's ``conv1d`` (``nn.Conv1d(C, C, K, groups=C)``): ``weight [C, 1, K]``, optional ``bias [C]``; channels
    ``[x | B | C]`` sharded part by part."""

    def __init__(self, parts: list[int], kernel: int, bias: bool):
        super().__init__()
        self.weight = _sharded(parts, 1, kernel)
        self.bias = _sharded(parts) if bias else None


class GatedNorm(nn.Module):
    """HF's ``norm`` (``MambaRMSNormGated``): ``weight [I]``, sharded with the heads."""

    def __init__(self, intermediate: int):
        super().__init__()
        self.weight = _sharded([intermediate])


class Mamba2(LayerKind):
    cache_kind = StateSpec.kind

    def __init__(
        self, hidden_size: int, num_heads: int, head_dim: int, state_size: int, n_groups: int, conv_kernel: int,
        chunk_size: int, time_step_limit: tuple[float, float] = (0.0, float("inf")), use_bias: bool = False,
        use_conv_bias: bool = True, activation: str = "silu", eps: float = 1e-6, intermediate_size: int | None = None,
        layer_name: str = "", in_proj_scales: tuple[float, ...] | None = None, out_bias: bool | None = None,
        gated_norm: bool = True, norm_before_gate: bool = False,
    ):
        super().__init__()
        what = layer_name or "Mamba2"
        intermediate = num_heads * head_dim
        if intermediate_size is not None and intermediate_size != intermediate:
            raise ValueError(f"{what}: intermediate size {intermediate_size} != num_heads * head_dim {intermediate}")
        if num_heads % n_groups:
            raise ValueError(f"{what}: num_heads {num_heads} is not a multiple of n_groups {n_groups}")
        if conv_kernel < 2:
            raise ValueError(f"{what}: conv_kernel must be at least 2 (a kernel of 1 keeps no state), "
                             f"got {conv_kernel}")
        if activation not in ops.CONV_ACTIVATIONS:
            raise ValueError(f"{what}: activation {activation!r} not in {sorted(ops.CONV_ACTIVATIONS)}")
        world = dist.tp_size()
        dist.divide(n_groups, world, "n_groups (a rank holds whole groups)")
        self.layer_name, self.conv_kernel, self.chunk_size = layer_name, conv_kernel, int(chunk_size)
        self.num_heads, self.head_dim, self.state_size = num_heads // world, head_dim, state_size
        self.n_groups, self.intermediate = n_groups // world, intermediate // world
        self.group_size = intermediate // n_groups
        self.time_step_limit = (float(time_step_limit[0]), float(time_step_limit[1]))
        self.activation, self.eps = activation, float(eps)
        gn = n_groups * state_size
        conv_parts = [intermediate, gn, gn]
        self.conv_dim = sum(conv_parts) // world  # per rank
        proj_parts = [intermediate, *conv_parts, num_heads]  # z, x, B, C, dt
        self.in_proj = PartsColumnParallelLinear(hidden_size, proj_parts, use_bias)
        # Falcon-H1's mup_vector: in_proj's output times one factor per part (None: no factors)
        scale = None if in_proj_scales is None else ops.in_scale_vector(proj_parts, in_proj_scales, world, what)
        self.register_buffer("in_scale", scale, persistent=False)
        self.conv1d = DepthwiseConv(conv_parts, conv_kernel, use_conv_bias)
        self.dt_bias = _sharded([num_heads])
        self.A_log = _sharded([num_heads])
        self.D = _sharded([num_heads])
        self.norm = GatedNorm(intermediate) if gated_norm else None  # Falcon-H1 mamba_rms_norm false: no norm
        self.norm_before_gate = bool(norm_before_gate)
        self.out_proj = RowParallelLinear(intermediate, hidden_size, use_bias if out_bias is None else out_bias)
        self.conv_state: torch.Tensor | None = None  # [num_slots, conv_dim, K-1], bound by the engine
        self.ssm_state: torch.Tensor | None = None  # [num_slots, H, P, N]
        self.state_dtype = torch.float32

    # ---------------------------------------------------------------------------------------------------- cache
    def state_spec(self) -> StateSpec:
        """This rank's slot of this layer: the xBC conv inputs before the next token and the SSM state (float32, as
        transformers' scan returns it)."""
        return StateSpec(
            name=self.layer_name,
            conv_shape=(self.conv_dim, self.conv_kernel - 1),
            conv_dtype=self.in_proj.weight.dtype,  # transformers keeps the conv state in the projection's dtype
            recurrent_shape=(self.num_heads, self.head_dim, self.state_size),
            recurrent_dtype=self.state_dtype,
        )

    def bind_state(self, conv_state: torch.Tensor, recurrent_state: torch.Tensor) -> None:
        self.state_spec().check_bound(self.layer_name or "Mamba2", conv_state=conv_state, ssm_state=recurrent_state)
        self.conv_state, self.ssm_state = conv_state, recurrent_state

    # ------------------------------------------------------------------------- what the engine asks (LayerKind)
    def step_graph_layouts(self, tokens_per_seq: int) -> frozenset[str]:
        # The fixed-shape multi-token path (StateMetadata.tokens_per_seq) reads each sequence's window of q slots.
        return frozenset({"varlen"})

    def sequence_parallel_refusal(self) -> str | None:
        return "its state writes need every token of a sequence on one rank"

    # -------------------------------------------------------------------------------------------------- forward
    def params(self) -> dict:
        """The tensors and sizes ``ops.mamba2_rows`` reads (this rank's)."""
        return dict(
            num_heads=self.num_heads, head_dim=self.head_dim, n_groups=self.n_groups, state_size=self.state_size,
            intermediate=self.intermediate, group_size=self.group_size, chunk_size=self.chunk_size,
            time_step_limit=self.time_step_limit, activation=self.activation, eps=self.eps,
            conv_weight=self.conv1d.weight.squeeze(1), conv_bias=self.conv1d.bias, dt_bias=self.dt_bias,
            A_log=self.A_log, D=self.D, norm_weight=None if self.norm is None else self.norm.weight,
            norm_before_gate=self.norm_before_gate,
        )

    def forward(self, hidden_states: torch.Tensor, meta: StateMetadata) -> torch.Tensor:
        """``hidden_states [num_tokens, hidden]`` -> ``[num_tokens, hidden]``; reads and advances each sequence's
        conv and SSM states."""
        if self.conv_state is None:
            raise RuntimeError(f"{self.layer_name or 'Mamba2'}: no state bound (call bind_state first)")
        zxbcdt = self.in_proj(hidden_states)
        if self.in_scale is not None:
            zxbcdt = zxbcdt * self.in_scale
        p = self.params()
        if meta.decode_only:
            n = meta.state_slots.shape[0]
            y = self._decode_rows(zxbcdt[:n], p, meta.state_slots, meta.fresh)
            if n < zxbcdt.shape[0]:  # padding tokens past the batch
                y = torch.cat([y, y.new_zeros(zxbcdt.shape[0] - n, y.shape[1])])
        elif meta.tokens_per_seq:
            y = self._window_rows(zxbcdt, p, meta)
        else:
            y = self._mixed_eager(zxbcdt, p, meta)
        return self.out_proj(y)

    def _decode_rows(self, zxbcdt, p: dict, slots: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
        """One token per row (slot -1: padding row, zeros out, no state write), no host reads."""
        real = slots >= 0
        keep = real & ~fresh
        y, conv, ssm = ops.mamba2_rows(
            zxbcdt.unsqueeze(1), real.to(torch.long), read_state_rows(self.conv_state, slots, keep),
            read_state_rows(self.ssm_state, slots, keep), p, decode=True,
        )
        write_state_rows(self.conv_state, slots, real, conv)
        write_state_rows(self.ssm_state, slots, real, ssm)
        return y[:, 0] * real.to(y.dtype).unsqueeze(-1)

    def _window_rows(self, zxbcdt, p: dict, meta: StateMetadata) -> torch.Tensor:
        """A fixed-shape step of ``q = meta.tokens_per_seq`` token slots per sequence with no host reads (a graphed
        speculative verify step): the decode step once per slot column j, in order, each advancing the states the
        next reads. Column j of a sequence with fewer real tokens is a padding row (no state write); ``fresh`` holds
        for the first column only."""
        q, R = meta.tokens_per_seq, meta.state_slots.shape[0]
        if zxbcdt.shape[0] != R * q:
            raise ValueError(f"{self.layer_name or 'Mamba2'}: {zxbcdt.shape[0]} tokens for {R} sequences of {q} "
                             "slots (tokens_per_seq)")
        x = zxbcdt.view(R, q, -1)
        outs = []
        for j in range(q):
            slots = torch.where(meta.seq_lens > j, meta.state_slots, torch.full_like(meta.state_slots, PAD_SLOT))
            fresh = meta.fresh if j == 0 else torch.zeros_like(meta.fresh)
            outs.append(self._decode_rows(x[:, j].contiguous(), p, slots, fresh))
        return torch.stack(outs, 1).reshape(R * q, -1)

    def _mixed_eager(self, zxbcdt, p: dict, meta: StateMetadata) -> torch.Tensor:
        """Any mix of prefill segments and decode tokens (host-side routing): the chunked scan per sequence."""
        cu, slots, fresh = meta.host()
        live = [i for i in range(len(slots)) if slots[i] != PAD_SLOT and cu[i + 1] > cu[i]]
        live_slots = [slots[i] for i in live]
        if len(set(live_slots)) != len(live_slots):
            raise ValueError(f"{self.layer_name or 'Mamba2'}: two sequences of one batch share a state slot "
                             f"({live_slots})")
        y = zxbcdt.new_zeros(zxbcdt.shape[0], self.intermediate)  # padding tokens stay zero
        for i in live:
            s, e, slot = cu[i], cu[i + 1], slots[i]
            conv = self.conv_state.new_zeros(self.conv_state.shape[1:]) if fresh[i] else self.conv_state[slot]
            ssm = self.ssm_state.new_zeros(self.ssm_state.shape[1:]) if fresh[i] else self.ssm_state[slot]
            lens = torch.tensor([e - s], device=zxbcdt.device)
            out, new_conv, new_ssm = ops.mamba2_rows(zxbcdt[s:e].unsqueeze(0), lens, conv.unsqueeze(0),
                                                     ssm.unsqueeze(0), p, decode=False)
            y[s:e] = out[0]
            self.conv_state[slot] = new_conv[0].to(self.conv_state.dtype)
            self.ssm_state[slot] = new_ssm[0].to(self.ssm_state.dtype)
        return y
