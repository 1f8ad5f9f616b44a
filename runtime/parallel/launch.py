"""Engine-started ranks: ``LLM(..., tensor_parallel_size=N)`` runs N processes and behaves as one engine.

The calling process is rank 0: it schedules (admission, block tables, sampling) exactly as at N = 1. Ranks 1..N-1
are spawned here (``torch.multiprocessing`` "spawn"; each calls the build callback rank 0 handed to
:func:`start_ranks` -- the ``LLM`` class -- with the same arguments, on its shards) and then *follow*: before each
model call rank 0 broadcasts the step's inputs — every request's new tokens, start position, block table and state
slot, plus the sampling parameters for on-device sampling — and every rank runs the same runner call, so their
collectives (row-parallel all-reduces, the vocab all-gather) pair up. Only rank 0's result is used. The step messages are int64/float64 tensors on a gloo group (no pickling, no GPU sync on the
driver); the model's own collectives use the default group: gloo on CPU, NCCL when the device is CUDA with >= N
GPUs (rank r on ``cuda:base + r``).

Already-initialised ``torch.distributed`` (``torchrun``, or the ranks started here) means every rank runs the
engine itself (SPMD): nothing is spawned and ``tensor_parallel_size`` must equal the world size.

One engine-started group per process: ``LLM.close()`` (or garbage collection / interpreter exit) stops the
followers and destroys the group. Scripts using it need the ``if __name__ == "__main__":`` guard, as for any
"spawn" multiprocessing.
"""
from __future__ import annotations

import faulthandler
import functools
import gc
import json
import os
import shutil
import sys
import tempfile
import weakref
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from modelgen import settings

from .. import distributed
from ..work import Work
from .attention_dp import DataParallelBlocks, init_groups as init_data_parallel_groups
from .channel import ShmChannel, wanted as _shm_wanted
from .pipeline import init_groups as init_pipeline_groups

# Control commands (the first element of every header broadcast).
STOP, READY, STEP, SAMPLE, WARMUP, GREEDY, SPEC = range(7)  # SPEC: a speculative-decoding model call (flag: its kind)
_HEADER = 4  # [command, flag, number of work items, payload length]
_PER_WORK = 6  # seq_id, start_pos, tokens, table length, state slot, owner rank (attention DP; else 0)

_ACTIVE: "Ranks | None" = None  # the engine-started group of this process
_FOLLOWER = False  # this process is a rank spawned by Ranks (it follows rank 0's steps)


def _timeout() -> timedelta:
    return timedelta(seconds=settings.get("MODELGEN_DIST_TIMEOUT"))


def dump_stacks_later(who: str) -> None:
    """``MODELGEN_DUMP_STACKS_AFTER=S``: this process prints every thread's stack to stderr S seconds from now (once,
    without exiting) -- where each rank waits when a group hangs; a spawned rank's stack is otherwise out of reach."""
    after = settings.get("MODELGEN_DUMP_STACKS_AFTER")
    if after is None:
        return
    print(f"modelgen: {who} (pid {os.getpid()}) dumps its stacks in {after:g} s", file=sys.__stderr__, flush=True)
    faulthandler.dump_traceback_later(after, exit=False, file=sys.__stderr__)


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} = {value!r}: expected a positive integer")
    return value


def world_size_for(tensor_parallel_size: int, expert_parallel_size: int | None, pipeline_parallel_size: int = 1,
                   data_parallel_size: int = 1) -> int:
    """Ranks of a run: the tensor-parallel size (attention and dense MLPs are sharded over all ranks), or the
    expert-parallel size when only that is given (EP must divide it), times the pipeline stages; under attention
    data parallelism D groups of TP ranks (attention TP inside a group, the MoE/MLP layers over all ranks)."""
    tp = _positive("tensor_parallel_size", tensor_parallel_size)
    pp = _positive("pipeline_parallel_size", pipeline_parallel_size)
    dp = _positive("data_parallel_size", data_parallel_size)
    if dp > 1:
        if pp > 1:
            raise ValueError(f"data_parallel_size {dp} with pipeline_parallel_size {pp} is not supported")
        if expert_parallel_size is not None:
            raise ValueError(f"expert_parallel_size {expert_parallel_size} with data_parallel_size {dp}: the MoE "
                             f"layers run over all {dp * tp} ranks (leave expert_parallel_size unset)")
        return dp * tp
    if expert_parallel_size is None:
        return tp * pp
    ep = _positive("expert_parallel_size", expert_parallel_size)
    world = max(tp, ep)
    if world % ep:
        raise ValueError(f"expert_parallel_size {ep} does not divide tensor_parallel_size {tp}")
    return world * pp


def _json_args(args: dict) -> str:
    """The LLM arguments a follower rebuilds the engine from, as JSON (paths, dtype names, device strings)."""
    out = {}
    for key, value in args.items():
        if key in ("self", "__class__"):
            continue
        if key in ("model", "checkpoint") and value is not None:
            value = str(getattr(value, "path", value))  # a CheckpointDir travels as its directory
        elif isinstance(value, torch.dtype):
            value = str(value).removeprefix("torch.")
        elif isinstance(value, (torch.device, Path)):
            value = str(value)
        out[key] = value
    out["progress"] = False  # one bar, rank 0's
    try:
        return json.dumps(out)
    except TypeError:
        bad = [k for k, v in out.items() if not isinstance(v, (str, int, float, bool, list, dict, type(None)))]
        raise ValueError(f"LLM argument(s) {', '.join(bad)}: engine-started ranks rebuild the engine from plain "
                         f"values (paths, names, numbers); pass those instead") from None


def start_ranks(args: dict, tensor_parallel_size: int, expert_parallel_size: int | None,
                device, build: Callable[..., object]) -> tuple["Ranks | None", object]:
    """Set the MoE layout and, for N > 1 without an initialised group, spawn ranks 1..N-1 and join the group as
    rank 0. Returns (the :class:`Ranks` to drive, or None) and this rank's device.

    ``build``: what a follower calls with ``args`` (as plain values) to build its engine -- the ``LLM`` class; it
    travels to the spawned process by reference (pickled by its module and name), so it must be a module-level
    class or function. This module never imports the engine that drives it."""
    pp = args.get("pipeline_parallel_size", 1)
    dp = args.get("data_parallel_size", 1)
    world = world_size_for(tensor_parallel_size, expert_parallel_size, pp, dp)
    if _ACTIVE is not None and not _ACTIVE.closed:
        raise RuntimeError(f"an LLM with {_ACTIVE.world} engine-started ranks is open in this process; close() it "
                           f"before building another engine")
    mlp_dp = _positive("mlp_data_parallel_size", args.get("mlp_data_parallel_size", 1))
    if world % mlp_dp:
        raise ValueError(f"mlp_data_parallel_size {mlp_dp} does not divide the world size {world} "
                         f"(tensor_parallel_size)")
    if (pp > 1 or dp > 1) and (args.get("sequence_parallel") or mlp_dp > 1):
        raise ValueError("pipeline_parallel_size / data_parallel_size > 1 with sequence_parallel or "
                         "mlp_data_parallel_size > 1 is not supported (each re-routes the layers' collectives)")
    if (pp > 1 or dp > 1) and args.get("speculative_tokens"):
        # The speculative decoder's SPEC calls run the whole target and draft on every rank (TP); a pipeline stage
        # or a DP rank holds only part of them.
        raise ValueError("speculative_tokens with pipeline_parallel_size / data_parallel_size > 1 is not supported")
    if (pp > 1 or dp > 1) and args.get("target", "rocm") != "rocm":
        raise ValueError(f"pipeline_parallel_size / data_parallel_size > 1 are implemented for the rocm target, not "
                         f"{args.get('target')}")
    if (pp > 1 or dp > 1) and not _FOLLOWER and dist.is_available() and dist.is_initialized():
        raise ValueError("pipeline_parallel_size / data_parallel_size > 1 need the ranks the engine starts (rank 0 "
                         "schedules, the others follow); under torchrun every rank runs its own engine")
    distributed.set_parallel_config(distributed.ParallelConfig(
        expert_parallel_size, bool(args.get("sequence_parallel", False)), mlp_dp, pp, dp,
    ))
    distributed.set_groups()
    if dist.is_available() and dist.is_initialized():
        existing = dist.get_world_size()
        if world > 1 and world != existing:
            raise ValueError(f"tensor_parallel_size {world} differs from the torch.distributed world size {existing} "
                             f"this process was launched with")
        _init_groups(pp, dp)
        return None, device
    if world == 1:
        return None, device
    dev = torch.device(device)
    if dev.type == "cuda":
        base = dev.index or 0
        if torch.cuda.device_count() < base + world:
            raise ValueError(f"tensor_parallel_size {world} on {device}: needs GPUs {base}..{base + world - 1}, "
                             f"{torch.cuda.device_count()} visible")
        backend = "nccl"
    elif dev.type == "cpu":
        backend, base = "gloo", 0
    else:
        raise ValueError(f"device {device!r}: engine-started ranks run on cpu or cuda")
    ranks = Ranks(world, backend, dev.type, base, _json_args(args), build)
    try:
        _init_groups(pp, dp)
    except BaseException:
        ranks.shutdown()
        raise
    return ranks, (torch.device("cuda", base) if dev.type == "cuda" else dev)


def _init_groups(pp: int, dp: int) -> None:
    """The TP group of a pipeline stage (PP) or of a data-parallel group (attention DP); every rank calls this in the
    same order after joining the world."""
    if pp > 1:
        init_pipeline_groups(pp)
    elif dp > 1:
        init_data_parallel_groups(dp)


def abort_ranks_on_error(init):
    """Decorator of ``LLM.__init__``: if building rank 0's engine fails after the ranks were started, stop them
    (and destroy the group) before the exception propagates."""

    @functools.wraps(init)
    def wrapper(self, *a, **kw):
        try:
            init(self, *a, **kw)
        except BaseException:
            ranks = self.__dict__.get("_ranks")
            if ranks is not None:
                ranks.shutdown()
            raise

    return wrapper


class Ranks:
    """Rank 0's handle on the followers: spawn, handshake, step broadcasts, shutdown."""

    def __init__(self, world: int, backend: str, device_type: str, base_index: int, args_json: str,
                 build: Callable[..., object]):
        global _ACTIVE
        dump_stacks_later("rank 0")  # first: a bad value is refused before any rank is spawned
        self.world, self.backend = world, backend
        self.closed = False
        self.tmp = tempfile.mkdtemp(prefix="modelgen-ranks-")
        init = f"file://{self.tmp}/rendezvous"
        ctx = mp.get_context("spawn")
        self.procs, self.pipes = [], []
        threads = max(1, (os.cpu_count() or 1) // world)
        for rank in range(1, world):
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_worker, daemon=True, name=f"modelgen-rank{rank}",
                            args=(rank, world, init, backend, device_type, base_index, threads, args_json, build,
                                  send))
            p.start()
            send.close()
            self.procs.append(p)
            self.pipes.append(recv)
        _ACTIVE = self
        try:
            if device_type == "cuda":
                torch.cuda.set_device(base_index)
            dist.init_process_group(backend, init_method=init, rank=0, world_size=world, timeout=_timeout())
            self.control = dist.new_group(backend="gloo", timeout=_timeout())
            # Step messages through shared memory on GPU hosts (runtime/parallel/channel.py says why); the
            # gloo group stays for the handshake's all-reduce.
            self.channel = ShmChannel(_channel_path(init), 0, world, timeout_s=_timeout().total_seconds()) \
                if _shm_wanted(device_type) else None
        except BaseException:
            self._kill()
            raise
        self._finalizer = weakref.finalize(self, Ranks._final, self.procs, self.tmp)

    # ------------------------------------------------------------------------------------------------- handshake
    def ready(self, llm) -> None:
        """After rank 0 built its engine: every rank reports whether it built one, with its KV block count; a
        failure stops all ranks and raises naming it. Block ids are rank 0's, so rank 0 schedules over the smallest
        count (pipeline stages sized from a memory budget hold different numbers of layers, hence of blocks)."""
        self._header(READY, llm.blocks.num_blocks, 0, 0)
        status = torch.tensor([1, llm.blocks.num_blocks, -llm.blocks.num_blocks], dtype=torch.int64)
        dist.all_reduce(status, op=dist.ReduceOp.MIN, group=self.control)
        ok, lo = int(status[0]), int(status[1])
        if not ok:
            messages = []
            for rank, pipe in enumerate(self.pipes, start=1):
                if pipe.poll(30):
                    try:
                        messages.append(f"rank {rank}: {pipe.recv_bytes().decode(errors='replace')}")
                    except EOFError:
                        pass
            self.shutdown()
            raise RuntimeError("; ".join(messages) or "a follower rank failed to build its engine")
        if lo != llm.blocks.num_blocks:
            _use_fewer_blocks(llm.blocks, lo)
        if self.backend == "nccl":  # creates the NCCL communicator now, never inside a CUDA-graph capture
            dist.all_reduce(torch.zeros(1, device=llm.device))
            torch.cuda.synchronize(llm.device)

    # ------------------------------------------------------------------------------------------------ broadcasts
    def _header(self, command: int, flag: int, n: int, length: int) -> None:
        _bcast(torch.tensor([command, flag, n, length], dtype=torch.int64), self.control, self.channel)

    def send_step(self, command: int, work, blocks, state_pool, flag: int = 0, params=None) -> None:
        ints, tokens, tables = [], [], []
        owners = getattr(blocks, "owner", {})
        for w in work:
            table = blocks.tables[w.seq_id]
            slot = state_pool.slot(w.seq_id) if state_pool is not None else -1
            ints += (w.seq_id, w.start_pos, len(w.token_ids), len(table), slot, owners.get(w.seq_id, 0))
            tokens += w.token_ids
            tables += table
        payload = torch.tensor(ints + tokens + tables, dtype=torch.int64)
        self._header(command, flag, len(work), payload.numel())
        _bcast(payload, self.control, self.channel)
        if params is not None:
            floats = torch.tensor([[p.top_k, p.top_p, p.temperature] for p in params], dtype=torch.float64)
            _bcast(floats, self.control, self.channel)

    def send_warmup(self) -> None:
        self._header(WARMUP, 0, 0, 0)

    # -------------------------------------------------------------------------------------------------- shutdown
    def shutdown(self) -> None:
        """Stop the followers (STOP, then join; kill what does not exit) and destroy the group."""
        global _ACTIVE
        if self.closed:
            return
        self.closed = True
        try:
            if all(p.is_alive() for p in self.procs):
                self._header(STOP, 0, 0, 0)
        except Exception:  # a follower died: nothing to tell it
            pass
        try:
            # Tear down beside the followers, which do the same on STOP, and before waiting for them: a group
            # torn down after its peers exited hung rank 0 on two H200s (bench/tp.py's close, twice).
            _teardown(self.backend)
        finally:
            for p in self.procs:
                p.join(timeout=30)
            self._kill()
            distributed.set_parallel_config(distributed.ParallelConfig())
            distributed.set_groups()
            shutil.rmtree(self.tmp, ignore_errors=True)
            if _ACTIVE is self:
                _ACTIVE = None

    def _kill(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)

    @staticmethod
    def _final(procs, tmp) -> None:
        for p in procs:
            if p.is_alive():
                p.terminate()
        shutil.rmtree(tmp, ignore_errors=True)


class DriverRunner:
    """Rank 0's runner: broadcasts each call's inputs to the followers, then runs it locally.

    Only the calls every rank must make together are allowed through (``step``, ``step_sample``, ``warmup``);
    another method of the wrapped runner would run on rank 0 alone and deadlock in its first collective, so it
    raises instead. Plain attributes are read from the wrapped runner (``inner``)."""

    _LOCAL_CALLS = frozenset({"build_inputs", "bucket_for", "_bucket", "_stance"})  # no collectives inside

    def __init__(self, inner, ranks: Ranks, blocks, state_pool):
        self.inner, self.ranks, self.blocks, self.state_pool = inner, ranks, blocks, state_pool

    def __getattr__(self, name: str):
        value = getattr(self.inner, name)
        if callable(value) and not isinstance(value, type) and name not in self._LOCAL_CALLS \
                and getattr(value, "__self__", None) is self.inner:
            raise NotImplementedError(f"runner.{name}: not broadcast to the other ranks (an engine-started "
                                      f"tensor-parallel runner supports step, step_sample, step_greedy, "
                                      f"step_greedy_async and warmup)")
        return value

    def step(self, work, all_positions: bool = False):
        self.ranks.send_step(STEP, work, self.blocks, self.state_pool, flag=int(all_positions))
        return self.inner.step(work, all_positions=all_positions)

    def step_sample(self, work, params):
        self.ranks.send_step(SAMPLE, work, self.blocks, self.state_pool, params=params)
        return self.inner.step_sample(work, params)

    def step_greedy(self, work):
        """Greedy ids computed where the logits are (runners with ``remote_greedy``: pipeline stages, attention
        DP ranks)."""
        self.ranks.send_step(GREEDY, work, self.blocks, self.state_pool)
        return self.inner.step_greedy(work)

    def step_greedy_async(self, work):
        """A pipelined greedy step (runtime/engine/pipelined.py): every rank launches it; the followers do not read
        its tokens back (their ``chain`` rows feed their next step, as rank 0's do)."""
        self.ranks.send_step(GREEDY, work, self.blocks, self.state_pool, flag=1)
        return self.inner.step_greedy_async(work)

    def warmup(self) -> None:
        self.ranks.send_warmup()
        warm = getattr(self.inner, "warmup", None)
        if warm is not None:
            warm()

    def release_graphs(self) -> None:
        """Drop rank 0's own graphs (no broadcast: every follower releases its runner's graphs itself, in
        ``_worker``'s teardown)."""
        release = getattr(self.inner, "release_graphs", None)
        if release is not None:
            release()


def _use_fewer_blocks(blocks, usable: int) -> None:
    """Re-initialise rank 0's (still empty) block manager with ``usable`` blocks: ids every rank's cache holds (the
    blocks past them stay allocated, unused)."""
    if any(blocks.tables.values()):
        raise RuntimeError("the KV block manager is resized only before any request is admitted")
    if isinstance(blocks, DataParallelBlocks):
        blocks.__init__(usable + 1, blocks.block_size, len(blocks.managers))  # + this rank's scratch block
    else:
        blocks.__init__(usable, blocks.block_size)


# ------------------------------------------------------------------------------------------------------ followers
def release_graphs(llm) -> None:
    """Destroy the engine's CUDA graphs (decode and speculative) before its NCCL group goes: a graph that captured
    NCCL kernels holds a reference on the communicator, and NCCL's destroy/abort waits for those references -- with
    the graphs still alive, tearing down a TP=2 group on two H200s hung (faulthandler: in _abort_process_group).

    Each graph holder (the runner, the speculative decoder) drops its own graphs in ``release_graphs()``; a holder
    without that method holds none (CPU and neuron runners)."""
    for holder in (getattr(llm, "runner", None), getattr(llm, "speculative", None)):
        release = getattr(holder, "release_graphs", None)
        if release is not None:
            release()
    gc.collect()  # the graphs' last references go now, not at some later collection after the group is gone
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _teardown(backend: str) -> None:
    """Leave the group without waiting on peers: drop the one-shot all-reduce's symmetric buffers, then abort the
    NCCL communicators (``_abort_process_group``: no wait for outstanding work or for peers that already left, and
    it clears torch's group registry like ``destroy_process_group``); gloo groups are destroyed as before."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    if backend == "nccl":
        from ..ops.gpu import allreduce  # only on NCCL: the GPU ops package (Triton kernels) stays off CPU paths

        allreduce.reset()
        try:
            torch.cuda.synchronize()
        except RuntimeError:
            pass
        abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
        if abort is not None:
            try:
                abort()
                return
            except Exception:  # an older torch, or a backend without abort(): destroy below
                pass
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def _channel_path(init: str) -> Path:
    """The shared-memory control file beside the group's file rendezvous (``file://<tmp>/rendezvous``)."""
    return Path(init.removeprefix("file://")).parent / "control"


def _bcast(t: torch.Tensor, group, channel: "ShmChannel | None") -> torch.Tensor:
    """``dist.broadcast(t, src=0)`` over the control plane: the shared-memory channel when there is one."""
    if channel is not None:
        return channel.broadcast(t)
    dist.broadcast(t, src=0, group=group)
    return t


def _recv(n: int, dtype: torch.dtype, group, channel: "ShmChannel | None" = None) -> torch.Tensor:
    return _bcast(torch.empty(n, dtype=dtype), group, channel)


def follow(llm, control, channel: "ShmChannel | None" = None) -> None:
    """A follower's loop: receive each step's inputs from rank 0 and run the same runner call (results dropped)."""
    runner, blocks, pool = llm.runner, llm.blocks, llm.state_pool
    owners = getattr(blocks, "owner", None)  # attention DP: which rank runs each work item
    while True:
        command, flag, n, length = _recv(_HEADER, torch.int64, control, channel).tolist()
        if command == STOP:
            return
        if command == WARMUP:
            warm = getattr(runner, "warmup", None)
            if warm is not None:
                warm()
            continue
        if command not in (STEP, SAMPLE, GREEDY, SPEC):
            raise RuntimeError(f"follower: unexpected command {command}")
        data = _recv(length, torch.int64, control, channel).tolist()
        heads, rest = data[: n * _PER_WORK], data[n * _PER_WORK:]
        work, t = [], 0
        for i in range(n):
            seq_id, start, count, _, slot, _ = heads[i * _PER_WORK:(i + 1) * _PER_WORK]
            work.append(Work(seq_id, rest[t:t + count], start))
            t += count
        for i in range(n):
            seq_id, start, _, width, slot, owner = heads[i * _PER_WORK:(i + 1) * _PER_WORK]
            blocks.tables[seq_id] = rest[t:t + width]
            if owners is not None:
                owners[seq_id] = owner
            t += width
            if pool is not None:
                pool.slots[seq_id] = slot
                if start == 0 and command != SPEC:  # SPEC: the speculative decoder resets target slots itself
                    pool.reset(slot)  # rank 0 zeroed it at admission
        try:
            if command == SPEC:
                llm.speculative.follow(flag, work)
            elif command == STEP:
                runner.step(work, all_positions=bool(flag))
            elif command == GREEDY and flag:  # pipelined greedy decode: launched, never read here
                runner.step_greedy_async(work, read_back=False)
            elif command == GREEDY:
                runner.step_greedy(work)
            else:
                floats = _recv(3 * n, torch.float64, control, channel).view(n, 3).tolist()
                params = [SimpleNamespace(top_k=int(k), top_p=p, temperature=temp) for k, p, temp in floats]
                runner.step_sample(work, params)
        finally:
            blocks.tables.clear()
            if owners is not None:
                owners.clear()
            if pool is not None:
                pool.slots.clear()


def _worker(rank: int, world: int, init: str, backend: str, device_type: str, base_index: int, threads: int,
            args_json: str, build: Callable[..., object], errors) -> None:
    """Process body of rank ``rank``: join the group, build the engine (``build(**args)``), report at READY, then
    follow."""
    global _FOLLOWER
    _FOLLOWER = True
    dump_stacks_later(f"rank {rank}")
    torch.set_num_threads(threads)
    kwargs = json.loads(args_json)
    if device_type == "cuda":
        torch.cuda.set_device(base_index + rank)
        kwargs["device"] = f"cuda:{base_index + rank}"
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world, timeout=_timeout())
    control = dist.new_group(backend="gloo", timeout=_timeout())
    channel = ShmChannel(_channel_path(init), rank, world, timeout_s=_timeout().total_seconds()) \
        if _shm_wanted(device_type) else None
    llm, failed = None, False
    try:
        llm = build(**kwargs)
    except BaseException as e:  # reported by rank 0 at READY, in one line
        failed = True
        errors.send_bytes(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".encode())
    try:
        command, num_blocks, _, _ = _recv(_HEADER, torch.int64, control, channel).tolist()
        if command != READY:
            return  # rank 0 failed before READY and sent STOP
        mine = llm.blocks.num_blocks if llm is not None else num_blocks
        status = torch.tensor([0 if failed else 1, mine, -mine], dtype=torch.int64)
        dist.all_reduce(status, op=dist.ReduceOp.MIN, group=control)
        if failed or not int(status[0]):
            return
        if backend == "nccl":
            dist.all_reduce(torch.zeros(1, device=llm.device))
            torch.cuda.synchronize(llm.device)
        follow(llm, control, channel)
    finally:
        if llm is not None:
            release_graphs(llm)
        del llm
        _teardown(backend)
