"""Attention data parallelism for MoE (and dense) rocm models: ``LLM(..., data_parallel_size=D)``.

ATOM's / SGLang's DP attention. The engine starts D x T ranks (``tensor_parallel_size=T``, default 1; the TP
launcher, ``runtime/parallel/launch.py``), rank = d * T + t: D data-parallel groups of T ranks. Each group owns a
share of the requests and their KV cache: the engine's block manager is :class:`DataParallelBlocks`, one
:class:`~modelgen.runtime.block_manager.BlockManager` per group, and a request is placed at admission on the
group with the most free blocks (ties: the fewest requests, then the lowest group); it stays there until it
finishes or is preempted. Attention, norms, the embedding and the LM head are tensor-parallel inside the group
(``distributed.set_groups``: a TP group of T ranks) and run on that group's requests only. The MoE blocks
(``*SparseMoeBlock``) and gated MLPs (``*MLP``) of the generated module are built over the whole world
(``distributed.world_scope``: experts spread over the D x T ranks as expert parallelism, dense MLPs sharded D x T
ways) and run on every group's tokens: each rank all-gathers the step's tokens over the DP dimension (the ranks with
its TP rank; padded to the largest group's count, then compacted), runs the block, whose row-parallel / expert
partial sums are all-reduced over the world, and keeps its group's rows.

A step: rank 0 schedules every request and broadcasts the step with each work item's owner group; every rank runs
its group's items (a group without any runs one dummy token into a scratch KV block -- and, for Gated DeltaNet, the
state slot of another group's request, scratch on this group -- so the MoE collectives pair up), and each group's
TP rank 0 sends its logits rows (float32) to rank 0, which samples -- for an all-greedy step only the argmax ids
(int64). Not optimised: the all-gather is padded, the reduction is an all-reduce then a slice (not a
reduce-scatter; gloo has none), no overlap of attention with the collectives, decode CUDA graphs off. Paged K/V,
MLA latent caches and Gated DeltaNet state slots work alike; speculative decoding and PP are refused.
``tests/test_attention_dp.py`` checks D = 2 (and D = 2 x T = 2) against one rank on CPU (gloo).
"""
from __future__ import annotations

import sys
import types

import torch
import torch.distributed as dist
from torch import nn

from .. import distributed
from ..block_manager import BlockManager, CacheFullError
from .class_swap import swapped_classes

_COUNTS: list[int] = []  # tokens each DP group feeds this step (set by the runner before the forward)
_DP: dict = {}  # "group": this rank's data-parallel-dimension group (ranks with its TP rank), "size": T, "index": d


def data_parallel_size() -> int:
    return distributed.parallel_config().data_parallel_size


def init_groups(dp: int) -> None:
    """After ``init_process_group``: the world of D x T ranks (rank = d * T + t) gets one attention TP group per DP
    group ``d`` and one DP-dimension group per TP rank ``t`` (the ranks whose tokens differ: the MoE/MLP gather runs
    over it). Every rank creates every group in the same order (``new_group`` is collective)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if world % dp:
        raise ValueError(f"data_parallel_size {dp} does not divide the world size {world}")
    t = world // dp
    tp_groups = [dist.new_group(list(range(d * t, (d + 1) * t))) if t > 1 else None for d in range(dp)]
    dp_groups = [dist.new_group(list(range(i, world, t))) for i in range(t)]
    distributed.set_groups(t, rank % t, tp_groups[rank // t])
    _DP.update(group=dp_groups[rank % t], size=t, index=rank // t)


# ---------------------------------------------------------------------------------------------------- placement
class DataParallelBlocks:
    """The engine's block manager under attention DP: one manager per rank (each of ``num_blocks - 1`` usable
    blocks; the rank's last block is its scratch for idle steps). Same interface as ``BlockManager``; block ids in
    ``tables`` are local to the request's rank (``owner``)."""

    def __init__(self, num_blocks: int, block_size: int, dp: int):
        if num_blocks < 2:
            raise ValueError(f"num_blocks {num_blocks}: attention data parallelism needs at least 2 per rank")
        self.managers = [BlockManager(num_blocks - 1, block_size) for _ in range(dp)]
        self.num_blocks, self.block_size = num_blocks - 1, block_size
        self.scratch_block = num_blocks - 1
        self.owner: dict[int, int] = {}
        self.tables: dict[int, list[int]] = {}

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _place(self, seq_id: int, num_tokens: int) -> int | None:
        """The rank of ``seq_id``: its owner, or for a new request the least-loaded rank that fits it."""
        if seq_id in self.owner:
            return self.owner[seq_id]
        running = [0] * len(self.managers)
        for rank in self.owner.values():
            running[rank] += 1
        fits = [r for r, m in enumerate(self.managers) if m.can_allocate(seq_id, num_tokens)]
        return min(fits, key=lambda r: (-self.managers[r].num_free, running[r], r)) if fits else None

    def can_allocate(self, seq_id: int, num_tokens: int) -> bool:
        rank = self._place(seq_id, num_tokens)
        return rank is not None and self.managers[rank].can_allocate(seq_id, num_tokens)

    def ensure(self, seq_id: int, num_tokens: int) -> list[int]:
        rank = self._place(seq_id, num_tokens)
        if rank is None:
            raise CacheFullError(f"KV cache full: no data-parallel rank has {self.blocks_needed(num_tokens)} free "
                                 f"block(s) of {self.block_size} tokens for sequence {seq_id}")
        table = self.managers[rank].ensure(seq_id, num_tokens)  # grows in place: tables[seq_id] stays current
        self.owner[seq_id], self.tables[seq_id] = rank, table
        return table

    def release(self, seq_id: int) -> None:
        rank = self.owner.pop(seq_id, None)
        self.tables.pop(seq_id, None)
        if rank is not None:
            self.managers[rank].release(seq_id)

    @property
    def num_free(self) -> int:
        return sum(m.num_free for m in self.managers)

    def slot(self, seq_id: int, position: int) -> int:
        return self.managers[self.owner[seq_id]].slot(seq_id, position)


def make_block_manager(num_blocks: int, block_size: int):
    """The engine's block manager: per-rank placement under attention DP, the plain one otherwise."""
    dp = data_parallel_size()
    return DataParallelBlocks(num_blocks, block_size, dp) if dp > 1 else BlockManager(num_blocks, block_size)


# ------------------------------------------------------------------------------------------------- model build
def _gather_rows(x: torch.Tensor) -> torch.Tensor:
    """Every DP group's rows of this step, in group order: an all-gather over the DP dimension (the ranks of one
    group hold the same rows) of the padded rows, then compacted."""
    from .data import _gather

    counts, width = _COUNTS, max(_COUNTS)
    if x.shape[0] < width:
        x = torch.cat([x, x.new_zeros(width - x.shape[0], *x.shape[1:])])
    gathered = _gather(x, _DP["group"], len(counts))
    if all(c == width for c in counts):
        return gathered
    keep = torch.cat([torch.arange(r * width, r * width + c, device=x.device) for r, c in enumerate(counts)])
    return gathered.index_select(0, keep)


def _world_forward(self, x: torch.Tensor, *args) -> torch.Tensor:
    if args:
        raise TypeError(f"{type(self).__name__}: attention data parallelism wraps one-tensor MLP/MoE forwards")
    n, group = x.shape[0], _DP["index"]
    if _COUNTS[group] != n:
        raise RuntimeError(f"attention DP: {type(self).__name__} got {n} tokens, the step announced {_COUNTS}")
    with distributed.world_scope():
        out = self._dp_inner_forward(_gather_rows(x))
    start = sum(_COUNTS[:group])
    return out[start:start + n]


def _world_built(cls):
    def build(*args, **kwargs):
        with distributed.world_scope():
            return cls(*args, **kwargs)

    return build


def build_dp_model(target, module, config, hf_config: dict, engine_args: dict) -> nn.Module:
    """The generated model with its ``*SparseMoeBlock`` / ``*MLP`` classes built over the whole world and their
    outermost instances switched to gather-run-slice forwards."""
    if target.name != "rocm":
        raise ValueError(f"data_parallel_size is implemented for the rocm target, not {target.name}")
    name = module.MODEL_CLASS.__module__
    namespace = vars(sys.modules[name])
    world_classes = {k: v for k, v in namespace.items() if isinstance(v, type) and v.__module__ == name
                     and (k.endswith("SparseMoeBlock") or k.endswith("MLP"))}
    if not world_classes:
        raise ValueError(f"data_parallel_size: {name} has no *MLP or *SparseMoeBlock class to run over the ranks")
    with swapped_classes(namespace, {k: _world_built(v) for k, v in world_classes.items()}):
        model = target.build_model(module, config, hf_config, engine_args)
    from ..layers.linear import RowParallelLinear

    types_ = tuple(world_classes.values())
    for m in model.modules():
        if isinstance(m, types_) and getattr(m, "_dp_inner_forward", None) is None:  # outermost first (pre-order)
            m._dp_inner_forward = m.forward
            m.forward = types.MethodType(_world_forward, m)
            for inner in m.modules():
                if inner is not m:  # nested world classes (a shared-expert MLP) run inside this one's forward
                    inner._dp_inner_forward = False
                if isinstance(inner, RowParallelLinear):
                    # Built over the world, reduced over the world inside the forward: an all-reduce the model
                    # fused into the next norm (attention TP > 1) would sum over the attention group only.
                    inner.reduce_results = True
    return model


# ------------------------------------------------------------------------------------------------------ runner
class DataParallelRunner:
    """Every rank's runner under attention DP: runs this rank's work items (or a dummy token), announces every rank's
    token count to the MoE/MLP gathers, and brings the logits rows -- or, for a greedy step, the argmax ids -- to
    rank 0 in work order."""

    remote_greedy = True  # the engine asks for greedy ids: each rank takes the argmax of its own rows
    async_greedy = False  # no pipelined decode (runtime/engine/pipelined.py): each step's gathers are sized per step

    def __init__(self, inner, blocks: DataParallelBlocks, vocab_size: int):
        self.inner, self.blocks, self.vocab_size = inner, blocks, vocab_size
        self.tp, self.group = _DP["size"], _DP["index"]  # attention TP ranks per DP group; this rank's group
        self.groups = dist.get_world_size() // self.tp
        self.rank = dist.get_rank()
        inner.graphs = None  # the gathers' sizes change every step: no decode CUDA graphs

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def step(self, work, all_positions: bool = False, return_hidden: bool = False):
        if return_hidden:
            raise NotImplementedError("return_hidden under attention data parallelism")
        return self._run(work, all_positions, greedy=False)

    def step_greedy(self, work) -> list[int] | None:
        ids = self._run(work, False, greedy=True)
        return ids.tolist() if ids is not None else None

    def _run(self, work, all_positions: bool, greedy: bool):
        from ..work import Work

        owners = [self.blocks.owner[w.seq_id] for w in work]  # DP groups
        mine = [w for w, o in zip(work, owners) if o == self.group]
        tokens = [0] * self.groups
        for w, o in zip(work, owners):
            tokens[o] += len(w.token_ids)
        _COUNTS[:] = [t or 1 for t in tokens]  # an idle rank feeds one dummy token
        dummy = not mine
        pool = getattr(self.inner, "state_pool", None)
        if dummy:
            mine = [Work(-1, [0], 0)]
            self.blocks.tables[-1] = [self.blocks.scratch_block]
            if pool is not None:
                # Recurrent state (Gated DeltaNet): slots are numbered across ranks and a rank keeps only its own
                # requests' states, so another rank's request's slot is scratch here.
                pool.slots[-1] = pool.slot(work[0].seq_id)
        try:
            logits = self.inner.step(mine, all_positions=all_positions)
        finally:
            if dummy:
                self.blocks.tables.pop(-1, None)
                if pool is not None:
                    pool.slots.pop(-1, None)
            _COUNTS.clear()
        out = logits.argmax(-1) if greedy else logits.float()
        rows = [len(w.token_ids) if all_positions else 1 for w in work]
        if self.rank != 0:
            if not dummy and self.rank == self.group * self.tp:  # the group's TP rank 0 answers for it
                dist.send(out.contiguous(), dst=0)
            return None
        parts = {0: out}
        for g in range(1, self.groups):
            count = sum(n for n, o in zip(rows, owners) if o == g)
            if count:
                shape = (count,) if greedy else (count, self.vocab_size)
                parts[g] = torch.empty(shape, dtype=out.dtype, device=out.device)
                dist.recv(parts[g], src=g * self.tp)
        ordered, taken = [], [0] * self.groups
        for n, o in zip(rows, owners):
            ordered.append(parts[o][taken[o]:taken[o] + n])
            taken[o] += n
        return torch.cat(ordered)


def wrap_runner(runner, blocks, vocab_size: int):
    """The engine's runner: :class:`DataParallelRunner` under attention DP, ``runner`` otherwise."""
    return DataParallelRunner(runner, blocks, vocab_size) if isinstance(blocks, DataParallelBlocks) else runner
