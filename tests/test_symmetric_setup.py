"""Symmetric-memory set-up is agreed by every rank (runtime/ops/gpu/symmetric_memory.py ``symmetric_buffers``): when
one rank cannot allocate or rendezvous, every rank falls back together instead of its peers waiting in the collective
rendezvous for ever (what hung a TP=2 GPU test: bench/results/h200x2-tp-moe-test-hang.log). Two gloo processes on
the CPU with the symmetric-memory calls replaced: which step fails on which rank is the parameter."""
from __future__ import annotations

import json
import os
import sys
import time

import pytest
import torch.multiprocessing as mp


def _rank(rank: int, world: int, init_file: str, fail: str, out: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    from modelgen.runtime.ops.gpu import allreduce, symmetric_memory

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    calls = {"empty": 0, "rendezvous": 0}

    def empty(numel, dtype, device):
        calls["empty"] += 1
        if fail == f"empty{rank}":
            raise RuntimeError("out of memory (test)")
        return torch.zeros(numel, dtype=dtype)

    def rendezvous(buf, group_name):
        calls["rendezvous"] += 1
        if fail == f"rendezvous{rank}":
            raise RuntimeError("no peer access (test)")
        return object()

    symm_mem.empty, symm_mem.rendezvous = empty, rendezvous
    if fail == f"spent{rank}":  # this rank's process ran a rendezvous in a group it has left (reset at teardown)
        symmetric_memory.SPENT["rendezvous_now"] = True
        allreduce.reset()
    made = symmetric_memory.symmetric_buffers(16, torch.float32, torch.device("cpu"), dist.group.WORLD, count=2)
    dist.barrier()
    with open(f"{out}.{rank}.tmp", "w") as f:
        json.dump({"made": made is not None, **calls}, f)
    os.replace(f"{out}.{rank}.tmp", f"{out}.{rank}")
    # Leave without C++ teardown once both ranks' results are on disk: one CI run (stop 22) saw rank 1 of this test
    # abort at exit after its result was decided ("terminate called without an active exception": a joinable C++
    # thread destroyed in torch/gloo's teardown, not in the code under test). The wait keeps either rank from leaving
    # while its peer is still inside a collective.
    deadline = time.monotonic() + 120
    while not all(os.path.exists(f"{out}.{r}") for r in range(world)) and time.monotonic() < deadline:
        time.sleep(0.01)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@pytest.mark.parametrize("fail", ["none", "empty1", "empty0", "rendezvous1", "spent0", "spent1"])
def test_every_rank_falls_back_together(tmp_path, fail):
    out = str(tmp_path / "result")
    mp.spawn(_rank, args=(2, str(tmp_path / "init"), fail, out), nprocs=2)
    got = [json.loads(open(f"{out}.{r}").read()) for r in range(2)]
    assert [g["made"] for g in got] == [fail == "none"] * 2
    if fail.startswith("spent"):  # one rank cannot rendezvous again in this process: nobody allocates
        assert [g["empty"] for g in got] == [g["rendezvous"] for g in got] == [0, 0]
        return
    assert [g["empty"] for g in got] == [1 if fail == f"empty{r}" else 2 for r in range(2)]  # a failure stops there
    # a failed allocation anywhere: nobody enters the rendezvous; a failed rendezvous: both entered, both drop it
    assert [g["rendezvous"] for g in got] == [0 if fail.startswith("empty") else (1 if fail == f"rendezvous{r}" else 2)
                                             for r in range(2)]


def test_in_use_follows_the_set_up_and_reset(monkeypatch):
    """``allreduce.in_use()`` (bench/tp.py records it): True only while a set-up op exists, False after a fallback
    (the state holds None) and after ``reset()``."""
    from modelgen.runtime.ops.gpu import allreduce, symmetric_memory

    monkeypatch.setattr(allreduce, "_STATE", {})
    monkeypatch.setattr(symmetric_memory, "SPENT", {"rendezvous_now": False, "earlier_world": False})
    assert not allreduce.in_use()
    allreduce._STATE["torch.bfloat16"] = None  # the set-up fell back to NCCL
    assert not allreduce.in_use()
    allreduce._STATE["torch.bfloat16"] = object()
    assert allreduce.in_use()
    allreduce.reset()
    assert not allreduce.in_use()


@pytest.mark.parametrize("value", ["abc", "0", "-3"])
def test_dump_stacks_after_refuses_a_bad_value(monkeypatch, value):
    from modelgen.runtime.parallel.launch import dump_stacks_later

    monkeypatch.setenv("MODELGEN_DUMP_STACKS_AFTER", value)
    with pytest.raises(ValueError, match="MODELGEN_DUMP_STACKS_AFTER.*seconds > 0"):
        dump_stacks_later("rank 0")


def test_dump_stacks_after_arms_faulthandler(monkeypatch):
    import faulthandler

    from modelgen.runtime.parallel.launch import dump_stacks_later

    armed = []
    monkeypatch.setattr(faulthandler, "dump_traceback_later", lambda t, **kw: armed.append((t, kw["exit"])))
    monkeypatch.setenv("MODELGEN_DUMP_STACKS_AFTER", "2.5")
    dump_stacks_later("rank 1")
    monkeypatch.delenv("MODELGEN_DUMP_STACKS_AFTER")
    dump_stacks_later("rank 1")  # unset: nothing
    assert armed == [(2.5, False)]
