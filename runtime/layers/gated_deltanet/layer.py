"""Gated DeltaNet token mixer of Qwen3-Next / Qwen3.5 for the rocm target (ATOM style: flattened tokens).

``GatedDeltaNet`` is transformers' ``Qwen3NextGatedDeltaNet`` / ``Qwen3_5GatedDeltaNet`` (5.24) over a batch of
flattened tokens ``[num_tokens, hidden]`` from many sequences, each continuing its own per-request state held in a
:class:`~modelgen.runtime.state_cache.StatePool` slot:

    in_proj -> (q, k, v | z | b, a);  causal conv1d + SiLU over [q, k, v] (conv state: last K-1 inputs)
    g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b);  gated delta rule (recurrent state S)
    out = out_proj(rmsnorm(o) * w * silu(z))

Segments of more than one token (prefill, or a chunk of one) run the chunked op, one-token segments (decode) the
recurrent op, batched; both from ``runtime/layers/gated_deltanet/ops.py``. A fixed-shape multi-token step
(``tokens_per_seq``: a graphed speculative verify window) runs the whole window in two kernels on the GPU
(``kernels.window_decode``), elsewhere the recurrent op once per token slot; no host reads either way.
Sequences whose slot is ``PAD_SLOT`` and tokens past ``cu_seqlens[-1]`` (padding) produce zeros and never read or write
any state.

Checkpoint layouts (``layout``):
  ``"qwen3_next"``: ``in_proj_qkvz`` and ``in_proj_ba`` as stored, interleaved *per key head*: for each key head,
      ``[q (Dk), k (Dk), v (r*Dv), z (r*Dv)]`` and ``[b (r), a (r)]`` with ``r = num_v_heads / num_k_heads``. A rank's
      key heads are therefore one contiguous row range of each weight: plain column-parallel sharding is consistent.
  ``"qwen3_5"``: split ``in_proj_qkv`` / ``in_proj_z`` / ``in_proj_b`` / ``in_proj_a``, fused here into the same two
      GEMMs (``in_proj_qkvz`` with shard ids ``"qkv"``, ``"z"``; ``in_proj_ba`` with ``"b"``, ``"a"``; see
      :data:`QWEN3_5_PACKED_MODULES`), each rank's rows laid out ``[q, k, v, z]`` / ``[b, a]`` of its own heads.
Both give the conv input ``[q (Hk*Dk), k (Hk*Dk), v (Hv*Dv)]`` of HF's ``conv1d``; ``conv1d.weight``, ``A_log``,
``dt_bias`` and ``out_proj`` are sharded by the same heads, ``norm.weight`` (per head dim) is replicated.
"""
from __future__ import annotations

import torch
from torch import nn

from ... import distributed as dist
from ...ops import gpu
from ...state_cache import PAD_SLOT, StateMetadata, StateSpec, write_state_rows
from ..kind import LayerKind
from ..linear import ColumnParallelLinear, RowParallelLinear, _check_shape, linear
from . import ops as gd

LAYOUTS = ("qwen3_next", "qwen3_5")

# Load-time projection fusion (``GatedDeltaNet.process_weights_after_loading``): this rank's ``in_proj_qkvz`` rows are
# permuted to blocks ``[q | k | v | z]`` (and ``in_proj_ba``'s to ``[b | a]``), and both weights become views into one
# ``[N_qkvz + N_ba, H]`` buffer run as one linear; the split is then views only (no ``torch.cat`` of the conv input).
# At decode this saves one GEMV launch and one copy per GDN layer (bench/NOTES-gdn.md: Qwen3-Next bs1 is launch
# bound). Read when the weights are loaded, so an A/B leg (bench/gdn_ab.py) sets it before building its engine.
# Applied on every device: a row permutation / row concatenation leaves each output element the same dot product
# (tests/test_gated_deltanet_layer.py checks bitwise equality on CPU), so the CPU parity tests cover this path too.
FUSED_PROJECTIONS = True

# Qwen3.5 HF module name -> (fused parameter, shard id): the packed_modules_mapping entries a generated model needs.
QWEN3_5_PACKED_MODULES = {
    "in_proj_qkv": ("in_proj_qkvz", "qkv"),
    "in_proj_z": ("in_proj_qkvz", "z"),
    "in_proj_b": ("in_proj_ba", "b"),
    "in_proj_a": ("in_proj_ba", "a"),
}


def _block_rows(num_groups: int, parts: list[int]) -> torch.Tensor:
    """Row order taking ``num_groups`` interleaved groups of ``parts`` (``[p0, p1, ...]`` per group) to blocks
    ``[p0 of every group | p1 of every group | ...]``."""
    idx = torch.arange(num_groups * sum(parts)).view(num_groups, sum(parts))
    return torch.cat([block.reshape(-1) for block in idx.split(parts, dim=1)])


def _load_head_parts(param: torch.Tensor, loaded: torch.Tensor, parts: list[int], offset: int, what: str) -> None:
    """Copy this rank's rows of each part of ``loaded`` (parts stacked on dim 0, each split evenly by heads across
    ranks) into ``param`` rows ``offset..``, one part after the other."""
    rank, world = dist.tp_rank(), dist.tp_size()
    _check_shape(param, (sum(parts), *param.shape[1:]), loaded, what)
    start = 0
    for size in parts:
        local = size // world
        param.data.narrow(0, offset, local).copy_(loaded.narrow(0, start + rank * local, local))
        offset += local
        start += size


class HeadPartsParallelLinear(ColumnParallelLinear):
    """Column-parallel GEMM over several checkpoint tensors, each made of head-sharded parts.

    ``shards`` maps a shard id to the parts of its checkpoint tensor (``{"qkv": [Hk*Dk, Hk*Dk, Hv*Dv], "z": [Hv*Dv]}``);
    each rank holds its slice of every part, in order (``[q_r, k_r, v_r, z_r]``), so a local split needs no gather.
    """

    def __init__(self, in_features: int, shards: dict[str, list[int]]):
        world = dist.tp_size()
        for sid, parts in shards.items():
            for size in parts:
                dist.divide(size, world, f"rows of shard {sid!r}")
        self.shards = shards
        self.offsets, offset = {}, 0
        for sid, parts in shards.items():
            self.offsets[sid] = offset
            offset += sum(parts) // world
        super().__init__(in_features, sum(sum(p) for p in shards.values()), bias=False)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        if shard_id not in self.shards:
            raise ValueError(f"fused projection needs a shard id in {list(self.shards)}, got {shard_id!r}")
        _load_head_parts(param, loaded, self.shards[shard_id], self.offsets[shard_id], f"shard {shard_id}")


class DepthwiseConv1dWeight(nn.Module):
    """Holds HF's ``conv1d.weight [conv_dim, 1, K]`` (no bias in these models), channels sharded by heads in parts."""

    def __init__(self, parts: list[int], kernel: int):
        super().__init__()
        self.parts = parts
        local = sum(dist.divide(p, dist.tp_size(), "conv1d channels") for p in parts)
        self.weight = nn.Parameter(torch.empty(local, 1, kernel), requires_grad=False)
        self.weight.weight_loader = self.weight_loader

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id=None) -> None:
        _load_head_parts(param, loaded, self.parts, 0, "conv1d weight")


class GatedRMSNorm(nn.Module):
    """``Qwen3NextRMSNormGated``: weight as stored (not zero-centred), replicated on every rank."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return gd.gated_rms_norm(x, z, self.weight, self.eps)


def _head_param(num_heads: int) -> nn.Parameter:
    """A per-value-head vector (``A_log``, ``dt_bias``), sharded by heads."""
    p = nn.Parameter(torch.empty(dist.divide(num_heads, dist.tp_size(), "linear_num_value_heads")),
                     requires_grad=False)
    p.weight_loader = lambda param, loaded, shard_id=None: _load_head_parts(param, loaded, [num_heads], 0, "head vector")
    return p


class GatedDeltaNet(LayerKind):
    cache_kind = StateSpec.kind

    def __init__(
        self,
        hidden_size: int,
        num_k_heads: int,
        num_v_heads: int,
        head_k_dim: int,
        head_v_dim: int,
        conv_kernel: int,
        rms_norm_eps: float,
        layout: str = "qwen3_next",
        layer_name: str = "",
        state_dtype: torch.dtype = torch.float32,
        chunk_size: int = 64,
    ):
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"GatedDeltaNet: layout {layout!r} is not one of {LAYOUTS}")
        if num_v_heads % num_k_heads:
            raise ValueError(
                f"GatedDeltaNet: linear_num_value_heads ({num_v_heads}) is not a multiple of linear_num_key_heads "
                f"({num_k_heads})"
            )
        world = dist.tp_size()
        self.layout, self.layer_name = layout, layer_name
        self.num_k_heads = dist.divide(num_k_heads, world, "linear_num_key_heads")  # per rank
        self.num_v_heads = num_v_heads // num_k_heads * self.num_k_heads
        self.head_k_dim, self.head_v_dim = head_k_dim, head_v_dim
        self.key_dim, self.value_dim = self.num_k_heads * head_k_dim, self.num_v_heads * head_v_dim  # per rank
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.conv_kernel = conv_kernel
        self.state_dtype, self.chunk_size = state_dtype, chunk_size

        key_total, value_total = num_k_heads * head_k_dim, num_v_heads * head_v_dim
        if layout == "qwen3_next":
            # Key-head groups are contiguous rows: column-parallel sharding keeps whole groups on a rank.
            self.in_proj_qkvz = ColumnParallelLinear(hidden_size, 2 * key_total + 2 * value_total, bias=False)
            self.in_proj_ba = ColumnParallelLinear(hidden_size, 2 * num_v_heads, bias=False)
        else:
            self.in_proj_qkvz = HeadPartsParallelLinear(
                hidden_size, {"qkv": [key_total, key_total, value_total], "z": [value_total]}
            )
            self.in_proj_ba = HeadPartsParallelLinear(hidden_size, {"b": [num_v_heads], "a": [num_v_heads]})
        self.conv1d = DepthwiseConv1dWeight([key_total, key_total, value_total], conv_kernel)
        self.A_log = _head_param(num_v_heads)
        self.dt_bias = _head_param(num_v_heads)
        self.norm = GatedRMSNorm(head_v_dim, rms_norm_eps)
        self.out_proj = RowParallelLinear(value_total, hidden_size, bias=False)
        self.conv_state: torch.Tensor | None = None  # [num_slots, conv_dim, K-1], bound by the engine
        self.recurrent_state: torch.Tensor | None = None  # [num_slots, Hv, Dk, Dv]
        self.rows_layout = layout  # the projections' row order now: "qwen3_5" (blocks) once fused at load
        self.in_proj: torch.Tensor | None = None  # [N_qkvz + N_ba, H]: both weights' buffer once fused at load

    # ------------------------------------------------------------------------------------------------- loading
    def process_weights_after_loading(self) -> None:
        """With :data:`FUSED_PROJECTIONS`: permute this rank's projection rows to blocks (column-parallel sharding
        keeps whole key-head groups on a rank, so the local permutation is the whole one) and store both weights in
        one buffer, ``in_proj_qkvz.weight`` / ``in_proj_ba.weight`` becoming views of it (no extra memory)."""
        qkvz, ba = self.in_proj_qkvz, self.in_proj_ba
        if not FUSED_PROJECTIONS or self.in_proj is not None:
            return
        if (qkvz.fp8_block is not None or ba.fp8_block is not None or qkvz.bias is not None or ba.bias is not None
                or "forward" in qkvz.__dict__ or "forward" in ba.__dict__
                or qkvz.weight.dtype != ba.weight.dtype or qkvz.weight.device != ba.weight.device):
            return  # FP8 / biased / replaced-forward (runtime/parallel) projections keep their own GEMMs
        wq, wb = qkvz.weight.data, ba.weight.data
        if self.layout == "qwen3_next":
            r, dk, dv = self.num_v_heads // self.num_k_heads, self.head_k_dim, self.head_v_dim
            wq = wq[_block_rows(self.num_k_heads, [dk, dk, r * dv, r * dv]).to(wq.device)]
            wb = wb[_block_rows(self.num_k_heads, [r, r]).to(wb.device)]
        fused = torch.cat([wq, wb])
        n = wq.shape[0]
        qkvz.weight.data, ba.weight.data = fused[:n], fused[n:]
        self.in_proj, self.rows_layout = fused, "qwen3_5"

    def _projections(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(qkvz [T, N_qkvz], ba [T, N_ba])`` in ``self.rows_layout``: one linear over the fused buffer while the
        two weights are still its views (a later ``.to()`` would move them apart: then two GEMMs again)."""
        w = self.in_proj
        if w is not None and self.in_proj_qkvz.weight.data_ptr() == w.data_ptr():
            return linear(x, w).split([self.in_proj_qkvz.weight.shape[0], self.in_proj_ba.weight.shape[0]], dim=-1)
        return self.in_proj_qkvz(x), self.in_proj_ba(x)

    # ---------------------------------------------------------------------------------------------------- cache
    def state_spec(self) -> StateSpec:
        """This rank's slot of this layer (the recurrent-state counterpart of a ``LayerSpec``)."""
        return StateSpec(
            name=self.layer_name,
            conv_shape=(self.conv_dim, self.conv_kernel - 1),
            conv_dtype=self.in_proj_qkvz.weight.dtype,
            recurrent_shape=(self.num_v_heads, self.head_k_dim, self.head_v_dim),
            recurrent_dtype=self.state_dtype,
        )

    def bind_state(self, conv_state: torch.Tensor, recurrent_state: torch.Tensor) -> None:
        self.state_spec().check_bound(self.layer_name or "GatedDeltaNet", conv_state=conv_state,
                                      recurrent_state=recurrent_state)
        self.conv_state, self.recurrent_state = conv_state, recurrent_state

    # ------------------------------------------------------------------------- what the engine asks (LayerKind)
    def step_graph_layouts(self, tokens_per_seq: int) -> frozenset[str]:
        # The fixed-shape multi-token path (StateMetadata.tokens_per_seq) reads each sequence's window of q slots.
        return frozenset({"varlen"})

    def sequence_parallel_refusal(self) -> str | None:
        return "its state writes come from replicated projections of every token"

    # -------------------------------------------------------------------------------------------------- forward
    def _read_states(self, slots: list[int], fresh: list[bool]) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.tensor(slots, dtype=torch.long, device=self.conv_state.device)
        keep = torch.tensor([not f for f in fresh], dtype=torch.bool, device=idx.device)
        return gd.read_state_rows(self.conv_state, idx, keep), gd.read_state_rows(self.recurrent_state, idx, keep)

    def _write_states(self, slots: list[int], conv: torch.Tensor, rec: torch.Tensor) -> None:
        idx = torch.tensor(slots, dtype=torch.long, device=self.conv_state.device)
        self.conv_state.index_copy_(0, idx, conv.to(self.conv_state.dtype))
        self.recurrent_state.index_copy_(0, idx, rec.to(self.recurrent_state.dtype))

    def forward(self, hidden_states: torch.Tensor, meta: StateMetadata) -> torch.Tensor:
        """``hidden_states [num_tokens, hidden]`` -> ``[num_tokens, hidden]``; reads and advances each sequence's
        state slot."""
        if self.conv_state is None:
            raise RuntimeError(f"{self.layer_name or 'GatedDeltaNet'}: no state bound (call bind_state first)")
        T = hidden_states.shape[0]
        heads = (self.num_k_heads, self.num_v_heads, self.head_k_dim, self.head_v_dim)
        mixed, z, b, a = gd.split_projections(*self._projections(hidden_states), self.rows_layout, *heads)
        weight = self.conv1d.weight.squeeze(1)
        if meta.decode_only and gpu.enabled(mixed):
            from . import kernels as ggd  # Triton: imported only on the GPU path

            if ggd.FUSED_DECODE:  # gating, conv and delta rule in two launches (the same function)
                core = ggd.decode_with_gating(
                    mixed, a, b, self.A_log, self.dt_bias, weight, self.conv_state, self.recurrent_state,
                    meta.state_slots, meta.fresh, num_k_heads=self.num_k_heads, head_k_dim=self.head_k_dim,
                    head_v_dim=self.head_v_dim)
                o = self.norm(core.reshape(-1, self.head_v_dim), z.reshape(-1, self.head_v_dim))
                return self.out_proj(o.reshape(T, self.value_dim))
        if meta.tokens_per_seq and gpu.enabled(mixed):  # the whole verify window in two launches (bitwise
            from . import kernels as ggd  # _window_rows, which ran the decode kernels once per slot: 1.1-1.4x slower)

            core = ggd.window_decode(
                mixed, a, b, self.A_log, self.dt_bias, weight, self.conv_state, self.recurrent_state,
                meta.state_slots, meta.fresh, meta.seq_lens, meta.tokens_per_seq, num_k_heads=self.num_k_heads,
                head_k_dim=self.head_k_dim, head_v_dim=self.head_v_dim, checkpoints=self._checkpoints(meta))
            o = self.norm(core.reshape(-1, self.head_v_dim), z.reshape(-1, self.head_v_dim))
            return self.out_proj(o.reshape(T, self.value_dim))
        if not gpu.enabled(a):
            # torch's CPU elementwise loops vectorize exp/softplus/sigmoid only over contiguous inputs, and the vector
            # and scalar loops round differently (1 ulp in fp32): contiguous b, a (as HF's are) keep the bits of the
            # separate-GEMM path when they are views of the fused projections' output (FUSED_PROJECTIONS)
            a, b = a.contiguous(), b.contiguous()
        g, beta = gd.gdn_gating(self.A_log, a, self.dt_bias, b)
        if meta.decode_only:
            n = meta.state_slots.shape[0]
            core = self._decode_rows(mixed[:n], g[:n], beta[:n], weight, meta.state_slots, meta.fresh)
            if n < T:  # padding tokens past the batch
                core = torch.cat([core, core.new_zeros(T - n, *core.shape[1:])])
        elif meta.tokens_per_seq:
            core = self._window_rows(mixed, g, beta, weight, meta)
        else:
            core = self._mixed_eager(mixed, g, beta, weight, meta)
        o = self.norm(core.reshape(-1, self.head_v_dim), z.reshape(-1, self.head_v_dim))
        return self.out_proj(o.reshape(T, self.value_dim))

    def _decode_rows(self, mixed, g, beta, weight, slots: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
        """One token per row (row i = token i, slot -1 = padding row): conv update + recurrent step on the pool, no
        host reads (the same static function as the neuron decode bucket)."""
        return gd.gdn_mixer_static(
            mixed, g, beta, weight, self.conv_state, self.recurrent_state, torch.arange(mixed.shape[0], device=mixed.device),
            slots, fresh, num_k_heads=self.num_k_heads, head_k_dim=self.head_k_dim, head_v_dim=self.head_v_dim,
            decode=True,
        )

    def _window_rows(self, mixed, g, beta, weight, meta: StateMetadata) -> torch.Tensor:
        """A fixed-shape step of ``q = meta.tokens_per_seq`` token slots per sequence without host reads (a graphed
        speculative verify step): the one-token decode path once per slot column j, token j of every sequence, in
        order -- each call advances the conv and recurrent states in place and the next one reads them. Column j
        of a sequence with fewer real tokens runs as a padding row (slot -1: zeros out, no state write); ``fresh``
        holds for a sequence's first token only (its state is written from then on). Every token gets the decode
        step's own arithmetic (plain decoding's rounding, not the chunked op's). The CPU / reference path: on the
        GPU ``kernels.window_decode`` computes the same bits in two launches. With ``meta.checkpoints`` each real
        token's states are also copied to the slot's checkpoint, as ``window_decode`` writes them."""
        q = meta.tokens_per_seq
        R = meta.state_slots.shape[0]
        if mixed.shape[0] != R * q:
            raise ValueError(f"{self.layer_name or 'GatedDeltaNet'}: {mixed.shape[0]} tokens for {R} sequences of "
                             f"{q} slots (tokens_per_seq)")
        x, gr, br = mixed.view(R, q, -1), g.view(R, q, -1), beta.view(R, q, -1)
        ck = self._checkpoints(meta)
        outs = []
        for j in range(q):
            slots = torch.where(meta.seq_lens > j, meta.state_slots, torch.full_like(meta.state_slots, PAD_SLOT))
            fresh = meta.fresh if j == 0 else torch.zeros_like(meta.fresh)
            outs.append(self._decode_rows(x[:, j].contiguous(), gr[:, j].contiguous(), br[:, j].contiguous(), weight,
                                          slots, fresh))
            if ck is not None:  # the states after token j, as window_decode leaves them
                valid, src = slots >= 0, slots.clamp(min=0)
                for part, pool in zip(ck, (self.conv_state, self.recurrent_state)):
                    write_state_rows(part[:, j], slots, valid, pool.index_select(0, src))
        return torch.stack(outs, 1).reshape(R * q, *outs[0].shape[1:])

    def _checkpoints(self, meta: StateMetadata):
        """This layer's ``(conv, recurrent)`` checkpoint tensors of the step, or None."""
        return meta.checkpoints.get(self.layer_name) if meta.checkpoints else None

    def _mixed_eager(self, mixed, g, beta, weight, meta: StateMetadata) -> torch.Tensor:
        """Any mix of prefill segments and decode tokens (host-side routing: the CPU reference path)."""
        cu, slots, fresh = meta.host()
        live = [i for i in range(len(slots)) if slots[i] != PAD_SLOT and cu[i + 1] > cu[i]]
        live_slots = [slots[i] for i in live]
        if len(set(live_slots)) != len(live_slots):
            raise ValueError(f"{self.layer_name or 'GatedDeltaNet'}: two sequences of one batch share a state slot "
                             f"({live_slots})")
        heads = (self.num_k_heads, self.num_v_heads, self.head_k_dim, self.head_v_dim)
        core = mixed.new_zeros(mixed.shape[0], self.num_v_heads, self.head_v_dim)  # padding tokens stay zero
        decodes = [i for i in live if cu[i + 1] - cu[i] == 1]
        if decodes:  # one token each, batched
            dev = mixed.device
            tok = torch.tensor([cu[i] for i in decodes], dtype=torch.long, device=dev)
            core[tok] = self._decode_rows(
                mixed[tok], g[tok], beta[tok], weight, torch.tensor([slots[i] for i in decodes], device=dev),
                torch.tensor([fresh[i] for i in decodes], dtype=torch.bool, device=dev),
            ).to(core.dtype)
        for i in live:  # prefill segments (a whole prompt or one chunk of it): chunked op, one sequence at a time
            s, e = cu[i], cu[i + 1]
            if e - s == 1:
                continue
            conv0, rec0 = self._read_states([slots[i]], [fresh[i]])
            x, conv1 = gd.causal_conv1d(mixed[s:e].unsqueeze(0), weight, conv0)
            q, k, v = gd.split_conv_output(x, *heads)
            o, rec1 = gd.chunk_gated_delta_rule(q, k, v, g[s:e].unsqueeze(0), beta[s:e].unsqueeze(0), rec0,
                                                chunk_size=self.chunk_size)
            core[s:e] = o[0].to(core.dtype)
            self._write_states([slots[i]], conv1, rec1)
        return core
