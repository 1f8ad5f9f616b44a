"""Per-request failure isolation (issue 27, items 1 and 5): a request whose sampling fails ends with its own error
while every other request in flight finishes with the tokens it gets alone; a request that can never fit the KV
cache is refused at submission; sampling parameters that would overflow are floored or refused by name."""
from __future__ import annotations

import logging

import pytest

from modelgen.runtime.block_manager import CacheFullError
from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.engine.scheduler import RequestError, RequestTooLargeError, SamplingError

ENGINE = dict(target="rocm", dtype="float32", max_model_len=64, block_size=4, num_blocks=16, max_num_seqs=4)
PROMPTS = [[1, 5, 9, 33], [1, 7, 7, 7, 12], [1, 99, 3], [1, 40, 41, 42]]
# Greedy and seeded sampling mixed: the poisoned row sits between sampled rows, whose generators must not notice.
PARAMS = [
    SamplingParams(max_tokens=6, ignore_eos=True, temperature=0.8, seed=11),
    SamplingParams(max_tokens=6, ignore_eos=True),
    SamplingParams(max_tokens=6, ignore_eos=True, temperature=1.0, top_p=0.9, seed=5),
    SamplingParams(max_tokens=6, ignore_eos=True, temperature=0.7, seed=2),
]
POISONED = 2


def _poisoned(p: SamplingParams) -> SamplingParams:
    """``p`` with a temperature that validation no longer lets through (set after it): logits / 1e-300 are inf,
    softmax is NaN and ``torch.multinomial`` raises -- the failure of issue 27 item 5, now inside one row."""
    bad = SamplingParams(**{k: v for k, v in p.__dict__.items() if k != "_vllm_names"})
    bad.temperature = 1e-300
    return bad


@pytest.fixture(scope="module")
def llm(llama_checkpoint):
    path, _ = llama_checkpoint("gqa")
    return LLM(path, **ENGINE)


def _nothing_held(llm: LLM) -> None:
    assert llm.blocks.tables == {}, f"block tables left behind: {llm.blocks.tables}"
    assert sorted(llm.blocks.free) == list(range(llm.blocks.num_blocks)), "KV blocks leaked"


def test_one_poisoned_request_fails_alone_and_the_others_match_their_solo_runs(llm):
    alone = [llm.generate_ids([prompt], [p])[0] for prompt, p in zip(PROMPTS, PARAMS)]
    params = list(PARAMS)
    params[POISONED] = _poisoned(PARAMS[POISONED])
    with pytest.raises(RequestError, match="failed alone") as info:
        llm.complete(PROMPTS, params)
    assert isinstance(info.value.__cause__, SamplingError) and "sampling failed" in str(info.value.__cause__)
    outputs = info.value.outputs
    assert [o.outputs[0].finish_reason for o in outputs] == ["length", "length", "error", "length"]
    for i, out in enumerate(outputs):
        if i != POISONED:
            assert out.outputs[0].token_ids == alone[i], f"request {i} changed because a batch mate failed"
    _nothing_held(llm)
    assert llm.generate_ids(PROMPTS, PARAMS) == [llm.generate_ids([p], [q])[0] for p, q in zip(PROMPTS, PARAMS)]


def test_generate_ids_reports_the_token_ids_of_every_request(llm):
    params = list(PARAMS)
    params[0] = _poisoned(PARAMS[0])
    with pytest.raises(RequestError) as info:
        llm.generate_ids(PROMPTS, params)
    ids = info.value.outputs
    assert ids[0] == [] and all(len(ids[i]) == 6 for i in (1, 2, 3))
    _nothing_held(llm)


def test_the_step_returns_a_failed_request_with_its_own_error(llm):
    """The server's view (runtime/server/engine_loop.py drives steps): the failed request comes back among the
    emitted ones with ``error`` set and leaves the batch; the others keep running to the end."""
    params = list(PARAMS)
    params[1] = _poisoned(SamplingParams(max_tokens=6, ignore_eos=True, temperature=1.0, seed=1))
    reqs = llm.scheduler.make_requests(PROMPTS, params)
    waiting, running, failed = list(reqs), [], []
    try:
        while waiting or running:
            for r in llm.scheduler.step(waiting, running):
                if r.error is not None:
                    failed.append(r)
                    assert r not in running and r not in waiting and r.finish_reason == "error"
    finally:
        llm.scheduler.release_all([r.seq_id for r in reqs])
    assert failed == [reqs[1]] and isinstance(reqs[1].error, SamplingError)
    assert all(len(r.output) == 6 and r.error is None for i, r in enumerate(reqs) if i != 1)
    _nothing_held(llm)


def test_a_stream_raises_its_own_error(llm):
    with pytest.raises(SamplingError, match="sampling failed"):
        list(llm.stream(PROMPTS[0], _poisoned(PARAMS[0])))
    _nothing_held(llm)


def test_a_failure_of_the_step_itself_still_fails_the_call(llm, monkeypatch):
    """No request is to blame when the model call fails: raised as before, every block freed."""
    def broken(*a, **k):
        raise RuntimeError("kernel failed")

    monkeypatch.setattr(llm.runner, "step", broken)
    with pytest.raises(RuntimeError, match="kernel failed"):
        llm.generate_ids(PROMPTS, PARAMS)
    monkeypatch.undo()
    _nothing_held(llm)


# ------------------------------------------------------------------------------------------ admission refusal
def test_a_request_that_can_never_fit_the_cache_is_refused_before_anything_runs(llm):
    # 16 blocks of 4 tokens = 64 tokens; max_model_len 64 lets through what the cache check must catch.
    small = LLM(llm.checkpoint, **{**ENGINE, "num_blocks": 3})  # 12 tokens
    before = small.scheduler.next_id
    with pytest.raises(RequestTooLargeError, match=r"prompt 1 \(10 tokens \+ max_tokens 4\) needs 4 KV blocks but the "
                                                   r"cache has only 3"):
        small.generate_ids([[1, 2], list(range(1, 11))], SamplingParams(max_tokens=4, ignore_eos=True))
    assert small.scheduler.next_id == before, "a refused call must not have made any request"
    _nothing_held(small)
    # The refusal is a ValueError (the request's fault: HTTP 400) and still a CacheFullError (as before).
    assert issubclass(RequestTooLargeError, ValueError) and issubclass(RequestTooLargeError, CacheFullError)
    # Exactly at the boundary it runs to the end: prompt + max_tokens - 1 tokens are ever cached.
    assert len(small.generate_ids([list(range(1, 11))], SamplingParams(max_tokens=3, ignore_eos=True))[0]) == 3
    _nothing_held(small)


def test_the_refusal_reaches_the_scheduler_interface_too(llm):
    small = LLM(llm.checkpoint, **{**ENGINE, "num_blocks": 2})
    with pytest.raises(RequestTooLargeError):
        small.scheduler.make_requests([list(range(1, 10))], [SamplingParams(max_tokens=2)])


# ----------------------------------------------------------------------------------- parameters that overflow
def test_temperature_below_the_floor_is_raised_to_it_and_runs(llm, caplog):
    with caplog.at_level(logging.WARNING, logger="modelgen.runtime.engine.sampler"):
        p = SamplingParams(max_tokens=4, temperature=1e-300, seed=3, ignore_eos=True)
    assert p.temperature == 0.01 and "below 0.01" in caplog.text
    assert SamplingParams(temperature=0.5).temperature == 0.5 and SamplingParams().temperature == 0
    assert len(llm.generate_ids([PROMPTS[0]], p)[0]) == 4


@pytest.mark.parametrize("field, value", [
    ("logit_bias", {5: 1e308}),
    ("logit_bias", {5: -101}),
    ("repetition_penalty", 1e-300),
    ("seed", 2**64),
    ("seed", -1),
    ("temperature", float("inf")),
])
def test_overflowing_parameters_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=f"^{field} = ") as info:
        SamplingParams(**{field: value})
    assert "\n" not in str(info.value)


def test_the_largest_values_still_accepted(llm):
    p = SamplingParams(max_tokens=3, temperature=1.0, seed=2**64 - 1, logit_bias={7: 100}, repetition_penalty=0.01,
                       ignore_eos=True)
    assert llm.generate_ids([PROMPTS[0]], p)[0] == [7, 7, 7]  # a +100 bias dominates every logit


def test_the_server_loop_posts_the_error_to_that_request_only(llm):
    """runtime/server/engine_loop.py over the same step: the poisoned request's queue gets its SamplingError, the
    others their tokens to the end (no HTTP: the engine thread and the asyncio side only)."""
    import asyncio

    from modelgen.runtime.server.engine_loop import EngineLoop

    async def run() -> list:
        loop = EngineLoop(llm)
        try:
            params = list(PARAMS)
            params[POISONED] = _poisoned(PARAMS[POISONED])
            handles = loop.submit(PROMPTS, params)
            results = []
            for h in handles:
                tokens = []
                while True:
                    event = await asyncio.wait_for(h.events.get(), 120)
                    if isinstance(event, Exception):
                        results.append(event)
                        break
                    new, finish = event
                    tokens += new
                    if finish is not None:
                        results.append(tokens)
                        break
            return results
        finally:
            loop.shutdown()

    alone = [llm.generate_ids([prompt], [p])[0] for prompt, p in zip(PROMPTS, PARAMS)]
    results = asyncio.run(run())
    assert isinstance(results[POISONED], SamplingError)
    assert [r for i, r in enumerate(results) if i != POISONED] == [a for i, a in enumerate(alone) if i != POISONED]
    _nothing_held(llm)
