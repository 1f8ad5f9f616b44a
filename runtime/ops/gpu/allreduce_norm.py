"""One-launch all-reduce + residual add + RMSNorm for tensor-parallel decode on one host's GPUs (Triton, CUDA
symmetric memory), and the same kernel as a plain all-reduce.

Why: a decoder layer at TP=N all-reduces the o_proj and down_proj partial sums (one 8 KB bf16 row each at batch 1,
Llama-3-8B) and hands each to a fused add + RMSNorm: 64 all-reduce and 64 norm launches per step. Fusing the three
saves a launch, the all-reduce's output round trip through memory, and the norm kernel's ramp-up, as vLLM's custom
all-reduce, ATOM's ``tensor_model_parallel_fused_allreduce_rmsnorm`` and FlashInfer's TRT-LLM all-reduce fusion do.

Kernel, one program per row (a row's sum of squares then stays inside one program: splitting a row over programs
would need a second cross-program reduction, i.e. a second barrier, for 8-32 KB rows that one CTA reads at once):

1. copy-in: the program stores its row of this rank's partial sum into this rank's exchange buffer (symmetric memory,
   readable by the peers over NVLink) -- half ``epoch & 1``, slot ``row``;
2. barrier, per row: ``bar.sync``, then one thread writes the row's epoch into every rank's flag ``[row][this
   rank]`` (an atomic exchange with release semantics at system scope, ``atom.release.sys``); then it polls this
   rank's flags ``[row][peer]`` with acquire loads at system scope (``ld.acquire.sys``) until every peer's epoch has
   arrived, then ``bar.sync``. Memory ordering: the CTA barrier puts every thread's copy-in store before
   the one thread's release (PTX release is cumulative over what the releasing thread has observed, and ``bar.sync``
   makes the other threads' stores observed); a peer that acquires the flag value then sees the row, and its own
   ``bar.sync`` after the acquire extends that to all its threads (the pattern of vLLM's ``multi_gpu_barrier`` with
   ``need_fence``). Peer rows are read with ``.cg`` (L2, never a possibly stale L1 line);
3. every rank reads all ranks' rows (its own included) and sums them **in rank order in float32**, so all ranks get
   the same bits (they must sample the same token); the sum is rounded to the activation dtype (what the all-reduce
   returns), then the residual added and the RMSNorm applied exactly as ``gpu/norm.py`` does (same expressions, same
   block size and warps).

Epochs instead of resets: each rank keeps a per-row call counter ``epochs[row]`` (its own memory; only program
``row`` of this rank touches it, once per call, and every rank runs program ``row`` in the same calls because
collectives are called with the same shapes everywhere). A call's epoch ``e`` is written into the peers' flags; a
waiter passes once ``flag - e >= 0`` (int32 difference, so the counter may wrap). A peer can be at most one epoch
ahead -- its ``e + 1`` write needs this rank's ``e`` signal first -- so ``>=`` never lets a stale flag through and
never misses one that was overwritten. No host work, no reset: CUDA-graph replays just keep counting.

Why the buffer cannot be overwritten while a peer still reads it: slot ``row`` of half ``e & 1`` is written at
epochs e, e+2, ... A program writes epoch e only after it passed the barrier of epoch e-1 for that row, which needs
every peer's e-1 signal, which a peer sends in a later call than its epoch e-2 reads of the same place (a later
kernel on its stream, after those reads completed). Slots have a fixed place (``row * SLOT_BYTES``) whatever the
row width, so the plain all-reduce (rows of ``CHUNK`` elements) and the norm kernel (rows of the hidden size) share
one buffer, its epochs and flags. It is the alternating-buffer argument of ``allreduce.py``, made per row and chosen
on the device by the epoch parity, so it does not depend on the number of calls captured in a graph.

Every rank's buffer address is a kernel argument (a tuple: constant memory), not a device-side pointer table: no
load sits on the barrier's path. They are fixed at setup, so CUDA graphs capture them.

Progress: a program waits only for the same program on the peers; every program must be resident at once for that
(``MAX_SLOTS`` = 64 rows, fewer than the SMs of any GPU this runs on: the H200 has 132).

PDL: the kernel takes part like ``gpu/norm.py`` (``pdl.wait`` before touching anything, so everything -- the epoch
counter included -- happens after the previous kernel completed). With PDL off it is an ordinary launch, fully
serialised after a predecessor launched with PDL (a kernel without the launch attribute waits for completion).

Applies only where (:func:`all_reduce_add_rms_norm`, :func:`world_applies`, :func:`fits`): NCCL default-group world of 2..8 CUDA ranks (no sub-group), symmetric memory,
bf16/fp16/fp32 rows of at most ``SLOT_BYTES``, at most ``MAX_SLOTS`` rows, at most the one-shot size limit,
``MODELGEN_CUSTOM_ALLREDUCE`` and ``MODELGEN_FUSED_ALLREDUCE_NORM`` not "0". Setup is collective and lazy (the first
eligible call, never during CUDA-graph capture). NVLink multicast is never used (plain loads and stores only).
"""
from __future__ import annotations


import torch
import triton
import triton.language as tl

from modelgen import settings

from . import next_pow2, pdl

SLOT_BYTES = 32 * 1024  # one row: up to 16384 bf16 / 8192 fp32 values
MAX_SLOTS = 64  # rows per call (decode batches); all programs of a call must be resident at once
CHUNK = 4096  # elements per program of the plain all-reduce (8 KB bf16, 16 KB fp32)
MAX_WORLD = 8
HALF_BYTES = MAX_SLOTS * SLOT_BYTES
FLAGS_OFFSET = 2 * HALF_BYTES  # int32 flags [MAX_SLOTS][world] (room for MAX_WORLD ranks) after the two halves
TOTAL_BYTES = FLAGS_OFFSET + MAX_SLOTS * MAX_WORLD * 4
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
MODES = {"llama": 0, "zero_centred": 1, "weight_float32": 2}


@triton.jit
def _ptr(addr, T: tl.constexpr):
    """An exchange-buffer address (an integer kernel argument) as a pointer to ``T``. The compiler is told it is
    16-byte aligned (allocations are; every half, slot and flag offset is a multiple of 16 bytes), which keeps the
    copy-in stores and the peer loads vectorised."""
    return tl.multiple_of(addr.to(tl.int64).to(tl.pointer_type(T)), 16)


@triton.jit(do_not_specialize=["rank"])  # one binary for every rank (Triton would make rank 1 a constant)
def _allreduce_norm_kernel(
    x_ptr, r_ptr, w_ptr, o_ptr, ro_ptr, epochs, mine, bases, rank, total, eps, s_x, s_r, s_o, s_ro,
    WORLD: tl.constexpr, N: tl.constexpr, BLOCK: tl.constexpr, SLOT: tl.constexpr, HALF: tl.constexpr,
    FLAGS: tl.constexpr, NORM: tl.constexpr, ADD: tl.constexpr, MODE: tl.constexpr, PDL: tl.constexpr,
):
    T = x_ptr.dtype.element_ty
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    if NORM:
        mask = offs < N
    else:  # the plain all-reduce's last chunk may be partial
        mask = (offs < N) & (row * N + offs < total)
    row64 = row.to(tl.int64)
    pdl.wait(PDL)
    e = tl.load(epochs + row, cache_modifier=".cg") + 1
    tl.store(epochs + row, e)
    x = tl.load(x_ptr + row64 * s_x + offs, mask=mask, other=0.0)
    # independent of the peers: issued before the barrier so their latency hides behind it
    if ADD:
        r = tl.load(r_ptr + row64 * s_r + offs, mask=mask, other=0.0)
    if NORM:
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    place = (e & 1) * HALF + row * SLOT  # elements from a buffer's base: half by epoch parity, slot by row
    tl.store(_ptr(mine, T) + place + offs, x, mask=mask)
    tl.debug_barrier()  # every thread's copy-in before the release below
    for p in tl.static_range(WORLD):  # flags [row][rank] of every rank (this one's too)
        peer_flags = _ptr(bases[p] + FLAGS, tl.int32)
        tl.atomic_xchg(peer_flags + row * WORLD + rank, e, sem="release", scope="sys")
    my_flags = _ptr(mine + FLAGS, tl.int32)
    for p in tl.static_range(WORLD):
        while tl.atomic_add(my_flags + row * WORLD + p, 0, sem="acquire", scope="sys") - e < 0:
            pass
    tl.debug_barrier()  # the acquire above before every thread's peer reads below
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for p in tl.static_range(WORLD):  # rank order: identical bits on every rank
        src = _ptr(bases[p], T)
        acc += tl.load(src + place + offs, mask=mask, other=0.0, cache_modifier=".cg").to(tl.float32)
    s = acc.to(T)  # what the all-reduce returns
    if not NORM:
        tl.store(o_ptr + row64 * s_o + offs, s, mask=mask)
    else:
        if ADD:
            s = (s.to(tl.float32) + r.to(tl.float32)).to(T)
        tl.store(ro_ptr + row64 * s_ro + offs, s, mask=mask)
        # from here exactly gpu/norm.py's _rms_norm_kernel (and runtime/ops/norm.py's conventions)
        xf = s.to(tl.float32)
        var = tl.sum(xf * xf, 0) / N
        if MODE == 1:  # zero-centred (Qwen3-Next, Gemma): x_hat * (1 + w) in float32, rounded once
            y = xf * tl.math.rsqrt(var + eps) * (1.0 + w)
        elif MODE == 2:  # weight_float32 (OLMo-2, T5): (w * x_hat) in float32, rounded once
            y = w * (xf * tl.math.rsqrt(var + eps))
        else:  # Llama: x_hat rounded to the activation dtype before the weight multiply
            y = w * (xf * tl.math.rsqrt(var + eps)).to(T).to(tl.float32)
        tl.store(o_ptr + row64 * s_o + offs, y.to(o_ptr.dtype.element_ty), mask=mask)


class Exchange:
    """This rank's view of the symmetric exchange buffer: every rank's base address (as this process maps it), the
    flags inside them, and this rank's own epoch counters. ``keep`` holds whatever keeps the mapping alive."""

    def __init__(self, bases: list[int], rank: int, world: int, device: torch.device, keep: object = None):
        if not 1 <= world <= MAX_WORLD or not 0 <= rank < world or len(bases) != world:
            raise ValueError(f"allreduce_norm.Exchange: rank {rank} of world {world} with {len(bases)} buffers; "
                             f"expected 1..{MAX_WORLD} ranks, one buffer each")
        if any(b % 16 for b in bases):
            raise ValueError(f"allreduce_norm.Exchange: buffer bases {bases} are not 16-byte aligned")
        self.rank, self.world = rank, world
        self.bases = tuple(int(b) for b in bases)
        self.epochs = torch.zeros(MAX_SLOTS, dtype=torch.int32, device=device)
        self.keep = keep

    @classmethod
    def create(cls, group, device: torch.device) -> "Exchange":
        """Collective: every rank of ``group`` allocates and maps the buffer together."""
        import torch.distributed as dist

        from .symmetric_memory import symmetric_buffers

        made = symmetric_buffers(TOTAL_BYTES, torch.uint8, device, group)  # agreed by every rank, or None on all
        if made is None:
            raise RuntimeError("symmetric memory unavailable on some rank")
        buf, handle = made[0]
        # The flags must be zero on every rank before any peer may signal: zero, finish it, then a group barrier.
        buf[FLAGS_OFFSET:].zero_()
        torch.cuda.synchronize(device)
        dist.barrier(group=group)
        # buffer_ptrs are the allocations' bases; the tensor may sit at an offset inside (the same on every rank)
        offset = buf.data_ptr() - int(handle.buffer_ptrs[handle.rank])
        bases = [int(p) + offset for p in handle.buffer_ptrs]
        return cls(bases, handle.rank, handle.world_size, device, keep=(buf, handle))

    def launch(self, x2, r2, weight, out, rout, strides, eps, n, total, norm, add, mode):
        """Launch over rows of ``n`` elements (``total`` valid elements in all; ``strides``: the row strides of
        ``x2``, ``r2``, ``out``, ``rout``)."""
        rows = triton.cdiv(total, n)
        block = next_pow2(n)
        warps = 4 if block <= 2048 else (8 if block <= 8192 else 16)  # gpu/norm.py's choice: same reduction order
        es = x2.element_size()
        _allreduce_norm_kernel[(rows,)](
            x2, r2, weight, out, rout, self.epochs, self.bases[self.rank], self.bases, self.rank, total, eps,
            *strides, WORLD=self.world, N=n, BLOCK=block, SLOT=SLOT_BYTES // es, HALF=HALF_BYTES // es,
            FLAGS=FLAGS_OFFSET, NORM=norm, ADD=add, MODE=mode, num_warps=warps, **pdl.launch(x2.device))


def fits(x: torch.Tensor, max_bytes: int) -> bool:
    """Shape and dtype limits of the kernel for ``x`` as [rows, hidden] (the norm entry)."""
    n = x.shape[-1] if x.dim() else 1
    rows = x.numel() // n if n else 0
    es = x.element_size()
    return (x.dtype in DTYPES and x.dim() >= 1 and n > 0 and 0 < rows <= MAX_SLOTS and n * es <= SLOT_BYTES
            and x.numel() * es <= max_bytes)


def run_norm(ex: Exchange, x, residual, weight, eps, zero_centred=False, weight_float32=False):
    """The fused op on ``ex`` (no eligibility checks: :func:`all_reduce_add_rms_norm` makes them)."""
    shape, n = x.shape, x.shape[-1]
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    rows = x2.shape[0]
    mode = MODES["zero_centred" if zero_centred else ("weight_float32" if weight_float32 else "llama")]
    out_dtype = x.dtype if mode else torch.result_type(weight, x)  # as gpu/norm.py and runtime/ops/norm.py
    out = torch.empty((rows, n), dtype=out_dtype, device=x.device)
    rout = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    if residual is None:
        r2 = x2  # unused (ADD off)
    else:
        r2 = residual.reshape(-1, n)
        if r2.stride(-1) != 1:
            r2 = r2.contiguous()
    strides = (x2.stride(0), r2.stride(0), out.stride(0), rout.stride(0))
    ex.launch(x2, r2, weight, out, rout, strides, eps, n, rows * n, True, residual is not None, mode)
    return out.view(shape), rout.view(shape)


def run_all_reduce(ex: Exchange, x: torch.Tensor) -> torch.Tensor:
    """The plain all-reduce on ``ex``: ``x`` flattened into ``CHUNK``-element rows, the last one partial."""
    flat = x.reshape(-1) if x.is_contiguous() else x.contiguous().view(-1)
    out = torch.empty_like(flat)
    ex.launch(flat, flat, flat, out, out, (CHUNK,) * 4, 0.0, CHUNK, flat.numel(), False, False, 0)
    return out.view(x.shape)


# ------------------------------------------------------------------------------------------- lazy per-process state
_STATE: dict[str, object] = {}


def fused_enabled() -> bool:
    return settings.get("MODELGEN_FUSED_ALLREDUCE_NORM") and settings.get("MODELGEN_CUSTOM_ALLREDUCE")


def _max_bytes() -> int:
    return settings.get("MODELGEN_CUSTOM_ALLREDUCE_MAX_BYTES")


def world_applies(x: torch.Tensor) -> bool:
    """The group conditions: the default NCCL world (no TP sub-group) of 2..8 ranks, ``x`` on a CUDA GPU (not
    Triton's interpreter: the barrier needs two GPUs running at once)."""
    import torch.distributed as dist

    from ...tp_state import tp_group

    if not x.is_cuda or not dist.is_available() or not dist.is_initialized() or tp_group() is not None:
        return False
    return dist.get_backend() == "nccl" and 2 <= dist.get_world_size() <= MAX_WORLD


def exchange(x: torch.Tensor) -> Exchange | None:
    """This process's exchange buffer, set up on the first call that reaches here (collective: every rank reaches
    the same call, as tensor-parallel collectives run in the same order everywhere); None if it cannot be set up,
    or while a CUDA graph is being captured before it was (the call then takes the unfused path)."""
    if "ex" in _STATE:
        return _STATE["ex"]
    if torch.cuda.is_current_stream_capturing():
        return None
    import torch.distributed as dist

    try:
        _STATE["ex"] = Exchange.create(dist.group.WORLD, x.device)
    except Exception:  # no P2P between these GPUs, symmetric memory unavailable: the unfused path it is
        _STATE["ex"] = None
    return _STATE["ex"]


def all_reduce_add_rms_norm(x, residual, weight, eps, zero_centred=False, weight_float32=False):
    """``(rms_norm(all_reduce(x) + residual), all_reduce(x) + residual)`` in one launch, or None where the kernel
    does not apply (module docstring); ``residual=None``: the all-reduced ``x`` becomes the residual."""
    if not fused_enabled() or weight is None or not world_applies(x) or not fits(x, _max_bytes()):
        return None
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1] or not weight.is_contiguous():
        return None
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        return None
    ex = exchange(x)
    if ex is None:
        return None
    return run_norm(ex, x, residual, weight, eps, zero_centred, weight_float32)


def all_reduce(x: torch.Tensor) -> torch.Tensor | None:
    """The plain all-reduce through this kernel, or None where it does not apply."""
    if not settings.get("MODELGEN_CUSTOM_ALLREDUCE") or not world_applies(x):
        return None
    es = x.element_size()
    if x.dtype not in DTYPES or x.numel() == 0 or x.numel() * es > _max_bytes() or x.numel() > MAX_SLOTS * CHUNK:
        return None
    ex = exchange(x)
    if ex is None:
        return None
    return run_all_reduce(ex, x)


def exchange_ready() -> bool:
    """Whether this process's exchange buffer is set up (not attempted, not fallen back)."""
    return _STATE.get("ex") is not None


def reset() -> None:
    """Forget the buffer (tests that tear a process group down and start another)."""
    _STATE.clear()
