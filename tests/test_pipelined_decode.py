"""Pipelined greedy decode (runtime/engine/pipelined.py): step n + 1 launched before step n's tokens are read, its
input ids fed back on the device (runtime/ops/tokens.py). Every case compares with the plain engine
(``MODELGEN_PIPELINED_DECODE=0``) on the same checkpoint and checks that the pipelined path really ran (steps whose
ids name the previous step's rows), including stops mid-batch (a dropped row), admissions while decoding, a cache too
small to reserve ahead, sampled requests (never pipelined), and engine-started TP=2 (the followers' GREEDY flag).
"""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.ops.tokens import chain_token_ids, from_chain
from modelgen.runtime.targets.rocm.runner import RocmRunner

PROMPTS = [[1, 17, 42, 99, 3], [5, 6, 7, 120, 33, 8, 9], [9, 10], [44, 45, 46, 47]]


def _engine(path, monkeypatch, pipelined: bool, **kw):
    monkeypatch.setenv("MODELGEN_PIPELINED_DECODE", "1" if pipelined else "0")
    args = dict(target="rocm", dtype="float32", max_model_len=64, max_num_seqs=4)
    args.update(kw)
    return LLM(path, **args)


@pytest.fixture
def fed_steps(monkeypatch):
    """Counts the async steps and those whose ids were fed back from the device."""
    seen = {"async": 0, "fed": 0}
    original = RocmRunner.step_greedy_async

    def spy(self, work, read_back=True):
        seen["async"] += 1
        seen["fed"] += any(t < 0 for w in work for t in w.token_ids)
        return original(self, work, read_back)

    monkeypatch.setattr(RocmRunner, "step_greedy_async", spy)
    return seen


def test_chain_token_ids_replaces_only_fed_rows():
    chain = torch.tensor([70, 71, 72, 73])
    ids = torch.tensor([5, from_chain(2), 0, from_chain(0), from_chain(3)])
    assert chain_token_ids(ids, chain).tolist() == [5, 72, 0, 70, 73]


def test_greedy_batch_equals_plain_decode(llama_checkpoint, monkeypatch, fed_steps):
    path, _ = llama_checkpoint("gqa")
    params = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in (9, 1, 5, 12)]
    want = _engine(path, monkeypatch, False).generate(PROMPTS, params)
    assert fed_steps["async"] == 0
    llm = _engine(path, monkeypatch, True)
    got = llm.generate(PROMPTS, params)
    assert got == want
    assert [len(t) for t in got] == [9, 1, 5, 12]
    assert fed_steps["fed"] >= 10  # the longest request's decode steps after the first ran fed from the device
    assert llm.stats.decode_tokens == sum(len(t) - 1 for t in got)


def test_stop_token_mid_batch_drops_the_extra_row(llama_checkpoint, monkeypatch, fed_steps):
    """A request whose token is a stop token was already launched one step further: that row is dropped, the other
    requests continue, and outputs / finish reasons equal the plain path's."""
    path, _ = llama_checkpoint("gqa")
    free = _engine(path, monkeypatch, False).generate(PROMPTS, SamplingParams(max_new_tokens=10, ignore_eos=True))
    stop = free[0][3]  # request 0's fourth token: it stops there (and others may too, wherever it appears)
    params = SamplingParams(max_new_tokens=10, stop_token_ids=[stop])
    plain = _engine(path, monkeypatch, False)
    want = [(o.token_ids, o.finish_reason) for o in plain.complete(PROMPTS, params)]
    llm = _engine(path, monkeypatch, True)
    got = [(o.token_ids, o.finish_reason) for o in llm.complete(PROMPTS, params)]
    assert got == want
    assert got[0][0][-1] == stop and got[0][1] == "stop" and len(got[0][0]) <= 4
    assert any(reason == "length" for _, reason in got)
    assert fed_steps["fed"] > 0
    # nothing leaked: every block is free again (the dropped row's step wrote into blocks released after it)
    assert llm.blocks.num_free == llm.blocks.num_blocks


def test_admissions_and_tight_cache_fall_back_and_resume(llama_checkpoint, monkeypatch, fed_steps):
    """More requests than max_num_seqs (admissions while decoding) and a cache that cannot always reserve a slot
    ahead (preemptions): the engine leaves the pipelined path when it must and returns to it."""
    path, _ = llama_checkpoint("gqa")
    prompts = PROMPTS + [[3, 4, 5], [60, 61, 62, 63, 64, 65]]
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    kw = dict(block_size=4, num_blocks=12, max_num_seqs=3)
    plain = _engine(path, monkeypatch, False, **kw)
    want = plain.generate(prompts, params)
    llm = _engine(path, monkeypatch, True, **kw)
    assert llm.generate(prompts, params) == want
    assert fed_steps["fed"] > 0
    assert llm.stats.preemptions > 0 or plain.stats.preemptions == 0


def test_sampled_requests_are_never_pipelined(llama_checkpoint, monkeypatch, fed_steps):
    path, _ = llama_checkpoint("gqa")
    params = [SamplingParams(max_new_tokens=6, ignore_eos=True),
              SamplingParams(max_new_tokens=6, ignore_eos=True, temperature=0.8, seed=3)]
    want = _engine(path, monkeypatch, False).generate(PROMPTS[:2], params)
    assert _engine(path, monkeypatch, True).generate(PROMPTS[:2], params) == want
    assert fed_steps["async"] == 0


def test_stream_yields_each_token_once(llama_checkpoint, monkeypatch, fed_steps):
    path, _ = llama_checkpoint("gqa")
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    want = _engine(path, monkeypatch, False).generate([PROMPTS[1]], params)[0]
    llm = _engine(path, monkeypatch, True)
    deltas = list(llm.stream(PROMPTS[1], params))
    assert [t for d in deltas for t in d.token_ids] == want
    assert fed_steps["fed"] > 0


@pytest.mark.slow
def test_tensor_parallel_followers_feed_their_own_rows(tmp_path, monkeypatch):
    """Engine-started TP=2 on gloo: rank 0 pipelines, the followers launch the GREEDY-flagged steps without reading
    them back; tokens equal TP=1's plain decode."""
    from tests.llama_fixtures import make_llama

    make_llama(tmp_path, "gqa", num_hidden_layers=2)
    params = SamplingParams(max_new_tokens=10, ignore_eos=True)
    want = _engine(tmp_path, monkeypatch, False).generate(PROMPTS, params)
    llm = _engine(tmp_path, monkeypatch, True, tensor_parallel_size=2)
    try:
        assert llm.pipelined is not None
        assert llm.generate(PROMPTS, params) == want
        assert llm.stats.decode_tokens == sum(len(t) - 1 for t in want)
    finally:
        llm.close()


def test_request_cancelled_mid_flight_is_dropped(llama_checkpoint, monkeypatch, fed_steps):
    """A server cancels a request (removes it from ``running`` and releases it, runtime/server/engine_loop.py) while
    a step holding its row is in flight: the row is dropped and the others decode on unchanged."""
    path, _ = llama_checkpoint("gqa")
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    want = _engine(path, monkeypatch, False).generate(PROMPTS, params)
    llm = _engine(path, monkeypatch, True)
    reqs = llm._make_requests(PROMPTS, params)
    waiting, running = list(reqs), []
    steps = 0
    while waiting or running:
        llm._step(waiting, running)
        steps += 1
        if steps == 3:
            running.remove(reqs[1])
            llm._release_all([reqs[1].seq_id])
    assert [r.output for i, r in enumerate(reqs) if i != 1] == [w for i, w in enumerate(want) if i != 1]
    assert len(reqs[1].output) < 8 and reqs[1].output == want[1][:len(reqs[1].output)]
    assert fed_steps["fed"] > 0
    llm._release_all([r.seq_id for r in reqs])
    assert llm.blocks.num_free == llm.blocks.num_blocks
