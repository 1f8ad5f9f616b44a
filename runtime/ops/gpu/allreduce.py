"""One-shot all-reduce over CUDA symmetric memory for the small messages of decode (TP on one host's GPUs).

Why: a decode step at batch 1 all-reduces two 8 KB rows per layer (Llama-3-8B at TP=2: 64 per step); NCCL's ring takes
~25 us for each on the H200 pair (bench/results/h200x2-llama8b-tp.log), which eats the halved GEMM time. A one-shot
all-reduce (every rank copies its partial sums into a buffer its peers can read over NVLink, one barrier, every rank
reads all peers' buffers and sums) is one kernel of a few microseconds for such sizes -- the design of vLLM's and
SGLang's custom all-reduce and of PyTorch's ``symm_mem::one_shot_all_reduce`` that this module uses.

Buffers: two symmetric buffers used alternately. The kernel's barrier sits between the copy-in and the peer reads, so
a rank that runs ahead into the next all-reduce could overwrite its buffer while a slower peer is still reading the
previous one; alternating means a rank can only write a buffer again after passing the barrier of the all-reduce in
between, which its peers reach only after they finished reading. The buffer order is fixed at capture, so CUDA-graph
replays see the same sequence.

Precision: each rank sums the peers' rows in rank order in float32 (PyTorch's kernel), so every rank gets the same
bits -- the same property NCCL's ring gives and tensor parallelism needs (ranks must sample the same token).

Only NCCL groups of 2..8 CUDA ranks on one host, tensors up to ``max_bytes``; anything else returns None and the
caller uses NCCL. Multicast (NVLS) is never used (the device note: TORCH_SYMM_MEM_DISABLE_MULTICAST=1 stays set).
"""
from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from modelgen import settings

from .symmetric_memory import retire, symmetric_buffers

# Above this the ring's bandwidth wins over one-shot's world-size-fold reads (SGLang/vLLM tables put the crossover at
# 256 KB-1 MB for 2-8 H100/H200s); bench/allreduce.py measures it.
DEFAULT_MAX_BYTES = settings.declared("MODELGEN_CUSTOM_ALLREDUCE_MAX_BYTES").default


class OneShotAllReduce:
    def __init__(self, group: dist.ProcessGroup, device: torch.device, dtype: torch.dtype, max_bytes: int):
        self.group_name = group.group_name
        self.dtype = dtype
        self.max_numel = max_bytes // torch.empty((), dtype=dtype).element_size()
        made = symmetric_buffers(self.max_numel, dtype, device, group, count=2)
        if made is None:
            raise RuntimeError("symmetric memory unavailable on some rank")
        self.buffers = [buf for buf, _ in made]
        self.turn = 0

    def applies(self, x: torch.Tensor) -> bool:
        return x.dtype == self.dtype and x.is_cuda and x.numel() <= self.max_numel and x.is_contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        buf = self.buffers[self.turn][: x.numel()]
        self.turn ^= 1
        out = torch.empty_like(x)
        # The copy variant moves x into the symmetric buffer inside the same kernel (one launch).
        torch.ops.symm_mem.one_shot_all_reduce_copy_out(buf, x.reshape(-1), "sum", self.group_name, out.view(-1))
        return out


_STATE: dict[str, object] = {}


def enabled() -> bool:
    return settings.get("MODELGEN_CUSTOM_ALLREDUCE")


def _applies(x: torch.Tensor) -> bool:
    """The group conditions of both one-shot kernels: switched on, ``x`` on a GPU, an NCCL world of 2..8 ranks."""
    return enabled() and x.is_cuda and dist.get_backend() == "nccl" and 2 <= dist.get_world_size() <= 8


def one_shot(x: torch.Tensor) -> torch.Tensor | None:
    """The one-shot all-reduce of ``x`` over the default group, or None where it does not apply.

    Set up lazily on the first eligible call, which every rank reaches at the same point of the same forward (tensor
    parallel collectives run in the same order on every rank); never set up while a CUDA graph is being captured.

    The Triton kernel of ``allreduce_norm.py`` (norm off) where it applies, PyTorch's (:func:`pytorch_one_shot`)
    otherwise: on two H200s in graph replays (bench/allreduce.py, h200x2-allreduce-fused.json) it took 6.29 / 6.60 /
    7.32 / 8.48 us at 1 / 8 / 32 / 64 rows of 4096 bf16 against PyTorch's 7.72 / 8.08 / 10.60 / 12.19 (NCCL 8.04 /
    8.63 / 10.09 / 11.74), equal to NCCL bit for bit on integer inputs."""
    if not _applies(x):
        return None
    from . import allreduce_norm  # imports Triton: only on a GPU path that gets here

    y = allreduce_norm.all_reduce(x)
    return y if y is not None else pytorch_one_shot(x)


def pytorch_one_shot(x: torch.Tensor) -> torch.Tensor | None:
    """PyTorch's ``symm_mem`` one-shot kernel alone, or None where it does not apply: :func:`one_shot`'s fallback,
    and bench/allreduce.py's column for it."""
    if not _applies(x):
        return None
    key = str(x.dtype)
    op = _STATE.get(key)
    if op is None:
        if key in _STATE or torch.cuda.is_current_stream_capturing():
            return None
        try:
            max_bytes = settings.get("MODELGEN_CUSTOM_ALLREDUCE_MAX_BYTES")
            op = OneShotAllReduce(dist.group.WORLD, x.device, x.dtype, max_bytes)
        except Exception:  # no P2P between these GPUs, an old driver, symmetric memory unavailable: NCCL it is
            _STATE[key] = None
            return None
        _STATE[key] = op
    if op is None or not op.applies(x):
        return None
    return op(x)


def in_use() -> bool:
    """Whether this process set up a symmetric-memory all-reduce in its current group (the Triton exchange of
    ``allreduce_norm.py`` or PyTorch's one-shot) -- False where the set-up fell back to NCCL, e.g. a later group."""
    fused = sys.modules.get(f"{__package__}.allreduce_norm")
    return any(op is not None for op in _STATE.values()) or (fused is not None and fused.exchange_ready())


def reset() -> None:
    """Forget the buffers, this module's and the fused all-reduce + norm kernel's (tests that tear a process group
    down and start another). After a rendezvous in this group, later groups of this process take NCCL
    (``symmetric_memory.SPENT``)."""
    _STATE.clear()
    retire()
    fused = sys.modules.get(f"{__package__}.allreduce_norm")  # only if it was imported (it imports Triton)
    if fused is not None:
        fused.reset()
