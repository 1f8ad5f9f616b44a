"""runtime/parallel/channel.py: rank 0 -> followers step messages through shared memory (the engine-started TP
control plane on GPU hosts), checked across real processes on CPU."""
from __future__ import annotations

import multiprocessing as mp

import pytest
import torch

from modelgen.runtime.parallel import channel as ch

pytestmark = pytest.mark.skipif(not ch.supported(), reason="the shared-memory channel is used on x86-64 hosts only")


def _follower(path, rank, world, lengths, out):
    c = ch.ShmChannel(path, rank, world, capacity_words=64, timeout_s=20)
    got = []
    for n in lengths:
        ints = c.broadcast(torch.empty(n, dtype=torch.int64))
        floats = c.broadcast(torch.empty(2, dtype=torch.float64))
        got.append((ints.tolist(), floats.tolist()))
    out.put((rank, got))
    c.close()


def test_messages_reach_every_follower_in_order(tmp_path):
    world = 3
    lengths = [4, 0, 64, 65, 300, 1, 7]  # empty, exactly the payload area, one over, several pieces
    path = tmp_path / "control"
    writer = ch.ShmChannel(path, 0, world, capacity_words=64, timeout_s=20)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_follower, args=(path, r, world, lengths, out)) for r in range(1, world)]
    for p in procs:
        p.start()
    sent = []
    for i, n in enumerate(lengths):
        ints = torch.arange(n, dtype=torch.int64) * (i + 1) - 5
        floats = torch.tensor([0.1 * i, -3.5e300], dtype=torch.float64)
        writer.broadcast(ints)
        writer.broadcast(floats)
        sent.append((ints.tolist(), floats.tolist()))
    results = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert sorted(results) == [1, 2]
    for rank in (1, 2):
        assert results[rank] == sent
    writer.close()


def test_refuses_elements_that_are_not_eight_bytes(tmp_path):
    c = ch.ShmChannel(tmp_path / "control", 0, 2, capacity_words=8)
    with pytest.raises(TypeError, match="8-byte"):
        c.broadcast(torch.zeros(3, dtype=torch.int32))
    c.close()


def test_a_silent_writer_times_out_with_a_message(tmp_path):
    ch.ShmChannel(tmp_path / "control", 0, 2, capacity_words=8)
    reader = ch.ShmChannel(tmp_path / "control", 1, 2, capacity_words=8, timeout_s=0.2)
    with pytest.raises(TimeoutError, match="no message from rank 0"):
        reader.broadcast(torch.empty(2, dtype=torch.int64))


def test_only_gpu_groups_use_it_unless_forced(monkeypatch):
    monkeypatch.delenv("MODELGEN_SHM_CONTROL", raising=False)
    assert ch.wanted("cuda") is True and ch.wanted("cpu") is False
    monkeypatch.setenv("MODELGEN_SHM_CONTROL", "1")
    assert ch.wanted("cpu") is True
    monkeypatch.setenv("MODELGEN_SHM_CONTROL", "0")
    assert ch.wanted("cuda") is False


def test_engine_started_tp_over_the_channel_equals_one_rank(tmp_path, monkeypatch):
    """The launcher's control plane forced onto the channel on CPU (it is the default only for GPU groups): an
    engine-started TP=2 engine, sampling parameters and warm-up included, gives TP=1's greedy tokens."""
    from tests.test_parallel_launch import GREEDY, PROMPTS, make_llama

    from modelgen.runtime.engine.llm import LLM

    monkeypatch.setenv("MODELGEN_SHM_CONTROL", "1")
    make_llama(tmp_path / "ckpt", "gqa")
    kw = dict(target="rocm", dtype="float32", max_model_len=64, max_num_seqs=2)
    want = LLM(tmp_path / "ckpt", **kw).generate(PROMPTS, GREEDY)
    llm = LLM(tmp_path / "ckpt", tensor_parallel_size=2, **kw)
    try:
        assert llm._ranks.channel is not None
        llm.warmup()
        assert llm.generate(PROMPTS, GREEDY) == want
    finally:
        llm.close()
