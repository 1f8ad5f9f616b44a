"""Engine exception safety: whatever fails inside ``LLM.generate``/``score``, no KV block stays held and the next
call gives the tokens a fresh instance gives; prompt ids are checked against the vocabulary before admission."""
from __future__ import annotations

import pytest

import modelgen.runtime.engine.scheduler as scheduler_module
from modelgen.runtime.block_manager import CacheFullError
from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams

# Four requests over a 10-block cache (block_size 4): admission waits for blocks and decodes preempt (checked below).
PROMPTS = [[1, 5, 9, 33], [1, 7, 7, 7, 7, 7, 7, 7, 7, 7, 12], [1, 99], [1, 40, 41, 42, 43, 44, 45]]
# Greedy and seeded sampling mixed, so both the argmax path and the sampler run in the loop.
PARAMS = [
    SamplingParams(max_new_tokens=6, ignore_eos=True),
    SamplingParams(max_new_tokens=6, ignore_eos=True, temperature=0.8, top_k=20, seed=11),
    SamplingParams(max_new_tokens=6, ignore_eos=True),
    SamplingParams(max_new_tokens=6, ignore_eos=True, temperature=1.0, top_p=0.9, seed=5),
]
ENGINE = dict(target="rocm", dtype="float32", max_model_len=64, block_size=4, num_blocks=10, max_num_seqs=4)


class Injected(RuntimeError):
    pass


class _CountingHook:
    """Wraps a callable: counts calls and raises :class:`Injected` on call number ``fail_at`` (1-based)."""

    def __init__(self, fn, fail_at: int | None = None):
        self.fn, self.fail_at, self.calls = fn, fail_at, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.fail_at:
            raise Injected(f"injected failure at call {self.calls}")
        return self.fn(*args, **kwargs)


def _targets(llm: LLM):
    """name -> (object, attribute) of every hook point of the generate loop."""
    return {
        "runner.step": (llm.runner, "step"),
        "sample": (scheduler_module, "sample"),
        "blocks.ensure": (llm.blocks, "ensure"),
        "blocks.can_allocate": (llm.blocks, "can_allocate"),
        # The engine releases through its scheduler's per-request releaser list (bound at construction).
        "release": (llm.scheduler, "releasers"),
    }


def _assert_nothing_held(llm: LLM) -> None:
    assert llm.blocks.tables == {}, f"block tables left behind: {llm.blocks.tables}"
    assert sorted(llm.blocks.free) == list(range(llm.blocks.num_blocks)), "KV blocks leaked"


@pytest.fixture(scope="module")
def engine(llama_checkpoint):
    path, _ = llama_checkpoint("gqa")
    reference = LLM(path, **ENGINE).generate(PROMPTS, PARAMS)  # a fresh instance's tokens
    llm = LLM(path, **ENGINE)
    return llm, reference


def test_clean_run_preempts_and_matches_fresh_instance(engine):
    llm, reference = engine
    assert llm.generate(PROMPTS, PARAMS) == reference
    assert llm.stats.preemptions > 0, "the fixture must exercise preemption"
    _assert_nothing_held(llm)


@pytest.mark.parametrize("point", ["runner.step", "sample", "blocks.ensure", "blocks.can_allocate", "release"])
def test_failure_at_every_call_releases_everything(engine, monkeypatch, point):
    llm, reference = engine
    obj, attr = _targets(llm)[point]
    original = getattr(obj, attr)

    def hooked(fail_at=None):
        if point == "release":
            (release,) = original
            hook = _CountingHook(release, fail_at)
            return hook, (hook,)
        hook = _CountingHook(original, fail_at)
        return hook, hook

    # Count this hook's calls in a clean run, then fail at each of them in turn.
    counter, value = hooked()
    monkeypatch.setattr(obj, attr, value)
    assert llm.generate(PROMPTS, PARAMS) == reference
    total = counter.calls
    assert total > 0, f"{point} is never called by generate"
    for n in range(1, total + 1):
        monkeypatch.setattr(obj, attr, hooked(n)[1])
        with pytest.raises(Injected):
            llm.generate(PROMPTS, PARAMS)
        monkeypatch.setattr(obj, attr, original)
        _assert_nothing_held(llm)
        assert llm.generate(PROMPTS, PARAMS) == reference, f"{point} failing at call {n}/{total} changed later output"
        _assert_nothing_held(llm)


def test_keyboard_interrupt_mid_generate_releases(engine, monkeypatch):
    llm, reference = engine
    calls = {"n": 0}
    step = llm.runner.step

    def interrupted(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return step(*a, **k)

    monkeypatch.setattr(llm.runner, "step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        llm.generate(PROMPTS, PARAMS)
    monkeypatch.setattr(llm.runner, "step", step)
    _assert_nothing_held(llm)
    assert llm.generate(PROMPTS, PARAMS) == reference


def test_score_failure_releases(engine, monkeypatch):
    llm, _ = engine
    before = llm.score(PROMPTS[1])
    monkeypatch.setattr(llm.runner, "step", _CountingHook(llm.runner.step, fail_at=1))
    with pytest.raises(Injected):
        llm.score(PROMPTS[1])
    monkeypatch.undo()
    _assert_nothing_held(llm)
    assert llm.score(PROMPTS[1]).equal(before)


def test_request_too_large_for_cache_leaves_instance_usable(engine):
    llm, reference = engine
    with pytest.raises(CacheFullError, match="needs 11 KV blocks but the cache has only 10"):
        llm.generate([[1, 2], list(range(1, 42))], SamplingParams(max_new_tokens=2))
    _assert_nothing_held(llm)
    assert llm.generate(PROMPTS, PARAMS) == reference


@pytest.mark.parametrize(
    "bad, pattern",
    [
        (160, r"prompt 1: token id 160 at position 2 is outside the vocabulary: expected an integer in \[0, 159\] "
              r"\(vocab_size 160\)"),
        (-1, r"prompt 1: token id -1 at position 2 is outside the vocabulary"),
        (10**30, r"prompt 1: token id 1000000000000000000000000000000 at position 2"),
        (3.0, r"prompt 1: token id 3.0 at position 2"),
        (True, r"prompt 1: token id True at position 2"),
    ],
)
def test_prompt_ids_validated_before_admission(engine, monkeypatch, bad, pattern):
    llm, reference = engine
    step = _CountingHook(llm.runner.step)
    monkeypatch.setattr(llm.runner, "step", step)
    with pytest.raises(ValueError, match=pattern):
        llm.generate([[1, 2, 3], [1, 2, bad, 4]], SamplingParams(max_new_tokens=2))
    assert step.calls == 0, "a request ran before every prompt was validated"
    _assert_nothing_held(llm)
    with pytest.raises(ValueError, match=pattern.replace("prompt 1", "prompt 0")):
        llm.score([1, 2, bad, 4])
    _assert_nothing_held(llm)


def test_numpy_and_torch_integer_ids_are_accepted(engine):
    import numpy as np
    import torch

    llm, _ = engine
    params = SamplingParams(max_new_tokens=3, ignore_eos=True)
    want = llm.generate([PROMPTS[0]], params)
    assert llm.generate([np.array(PROMPTS[0], dtype=np.int64)], params) == want
    assert llm.generate([torch.tensor(PROMPTS[0])], params) == want


def test_empty_prompt_and_param_count(engine):
    llm, _ = engine
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        llm.generate([[1], []], SamplingParams(max_new_tokens=1))
    with pytest.raises(ValueError, match="2 prompts but 1 SamplingParams"):
        llm.generate([[1], [2]], [SamplingParams()])
    _assert_nothing_held(llm)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(temperature=float("nan")), r"temperature = nan: expected a finite number >= 0"),
        (dict(temperature=float("inf")), r"temperature = inf: expected a finite number"),
        (dict(temperature=-0.5), r"temperature = -0.5: expected a finite number >= 0"),
        (dict(top_p=0.0), r"top_p = 0.0: expected a number in \(0, 1\]"),
        (dict(top_p=float("nan")), r"top_p = nan"),
        (dict(top_p=1.5), r"top_p = 1.5"),
        (dict(seed=2**70), r"seed = 1180591620717411303424: expected an integer in \[0, 2\*\*64 - 1\]"),
        (dict(seed=-1), r"seed = -1"),
        (dict(top_k=-1), r"top_k = -1: expected an integer >= 0"),
        (dict(max_new_tokens=1.5), r"max_new_tokens = 1.5: expected an integer >= 0"),
    ],
)
def test_sampling_params_are_validated(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        SamplingParams(**kwargs)


def test_neuron_runner_failure_releases(llama_checkpoint, monkeypatch):
    path, _ = llama_checkpoint("gqa")
    llm = LLM(path, **{**ENGINE, "target": "neuron"})
    reference = llm.generate(PROMPTS, PARAMS)
    for n in (1, 2, 5):
        monkeypatch.setattr(llm.runner, "step", _CountingHook(llm.runner.step, fail_at=n))
        with pytest.raises(Injected):
            llm.generate(PROMPTS, PARAMS)
        monkeypatch.undo()
        _assert_nothing_held(llm)
        assert llm.generate(PROMPTS, PARAMS) == reference


def test_hf_config_readers_refuse_bad_values():
    from modelgen.runtime.hf_config import ConfigError, check_core_fields, read_float, read_int

    assert read_int({"n": 64.0}, "n", ("n",), minimum=1) == 64
    with pytest.raises(ConfigError, match=r"config.json field 'n' \(spec field 'n'\): expected an integer >= 1, got 0"):
        read_int({"n": 0}, "n", ("n",), minimum=1)
    with pytest.raises(ConfigError, match="expected a finite number, got nan"):
        read_float({"eps": float("nan")}, "eps", ("eps",))
    with pytest.raises(ConfigError, match="expected a finite number, got inf"):
        read_float({"eps": float("inf")}, "eps", ("eps",))
    check_core_fields({"num_hidden_layers": 2.0, "vocab_size": 1e9})  # integral floats are integers
    with pytest.raises(ConfigError, match=r"cfg.json: field 'head_dim' = True: expected a positive integer"):
        check_core_fields({"head_dim": True}, "cfg.json")
