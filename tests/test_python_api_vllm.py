"""The vLLM-shaped Python API: LLM(model=...), generate(str | list[str] | token-id prompts | dicts) -> RequestOutput
with CompletionOutputs, n samples, stop strings, logprobs, per-request stats, SamplingParams' vLLM names and the
deprecated old spellings (still working, with a DeprecationWarning)."""
from __future__ import annotations

import inspect
import warnings

import pytest

from modelgen import LLM, CompletionOutput, RequestOutput, SamplingParams
from tests.test_python_api import make_api_checkpoint


@pytest.fixture(scope="module")
def ckpt(llama_checkpoint, tmp_path_factory):
    return make_api_checkpoint(llama_checkpoint, tmp_path_factory)


@pytest.fixture(scope="module")
def llm(ckpt) -> LLM:
    return LLM(model=ckpt, device="cpu", max_num_seqs=4, progress=False)


P = SamplingParams(max_tokens=6, ignore_eos=True)


def test_model_keyword_and_positional(ckpt, llm):
    assert llm.checkpoint_dir == LLM(ckpt, device="cpu", progress=False).checkpoint_dir
    assert LLM(checkpoint=ckpt, device="cpu", progress=False).checkpoint_dir == llm.checkpoint_dir
    with pytest.raises(TypeError, match="not both"):
        LLM(ckpt, checkpoint=ckpt)


def test_generate_prompt_forms_give_request_outputs(llm):
    ids = llm.tokenizer.encode("hello world")
    want = llm.generate_ids([ids], P)[0]
    forms = ["hello world", ["hello world"], ids, [ids], {"prompt_token_ids": ids}, [{"prompt_token_ids": ids}],
             {"prompt": "hello world"}]
    for form in forms:
        (out,) = llm.generate(form, P)
        assert isinstance(out, RequestOutput) and isinstance(out.outputs[0], CompletionOutput), form
        assert out.prompt_token_ids == ids and out.outputs[0].token_ids == want, form
        c = out.outputs[0]
        assert c.text == llm.tokenizer.decode(want) and c.finish_reason == "length" and c.logprobs is None
        assert (out.text, out.token_ids, out.finish_reason) == (c.text, c.token_ids, c.finish_reason)
    assert llm.generate("hello world", P)[0].prompt == "hello world"
    two = llm.generate(["hello world", "world"], sampling_params=P)
    assert len(two) == 2 and two[0].token_ids == want
    with pytest.raises(ValueError, match="chat"):
        llm.generate([{"role": "user", "content": "hi"}], P)


def test_default_sampling_params_are_16_tokens(llm):
    out = llm.generate([[5, 6, 7]])[0]
    assert isinstance(out, RequestOutput) and len(out.token_ids) <= 16
    assert out.token_ids == llm.generate_ids([[5, 6, 7]], SamplingParams())[0]


def test_per_request_stats(llm):
    short, long_ = llm.generate([[5, 6], [5, 6, 7]], [SamplingParams(max_tokens=2, ignore_eos=True),
                                                      SamplingParams(max_tokens=9, ignore_eos=True)])
    assert (short.stats.generated_tokens, long_.stats.generated_tokens) == (2, 9)
    assert (short.stats.prompt_tokens, long_.stats.prompt_tokens) == (2, 3)
    assert short.stats.total_s < long_.stats.total_s  # its own end, not the batch's
    assert short.stats.queued_s is not None and short.stats.preemptions == 0
    assert short.metrics is short.stats


def test_n_samples_and_seeds(llm):
    p = SamplingParams(max_tokens=8, ignore_eos=True, temperature=1.0, seed=7, n=3)
    (out,) = llm.generate([[5, 6, 7]], p)
    assert [c.index for c in out.outputs] == [0, 1, 2]
    samples = [c.token_ids for c in out.outputs]
    assert len({tuple(s) for s in samples}) > 1  # seed + i: different samples
    for i, s in enumerate(samples):
        one = SamplingParams(max_tokens=8, ignore_eos=True, temperature=1.0, seed=7 + i)
        assert llm.generate([[5, 6, 7]], one)[0].token_ids == s
    assert out.stats.generated_tokens == 24
    assert llm.generate([[5, 6, 7]], p)[0].outputs[1].token_ids == samples[1]  # reproducible


def test_stop_strings(llm):
    full = llm.generate("hello world", SamplingParams(max_tokens=10, ignore_eos=True))[0].outputs[0]
    words = full.text.split()
    stop = words[3]
    k = words.index(stop)
    free = llm.blocks.num_free
    c = llm.generate("hello world", SamplingParams(max_tokens=10, ignore_eos=True, stop=[stop, "zzz"]))[0].outputs[0]
    assert c.finish_reason == "stop" and c.stop_reason == stop
    assert c.text == full.text[: full.text.index(stop)]
    assert c.token_ids == full.token_ids[: k + 1]  # ended at the token completing the stop string
    assert llm.blocks.num_free == free
    streamed = list(llm.stream("hello world", SamplingParams(max_tokens=10, ignore_eos=True, stop=stop)))
    assert "".join(d.text for d in streamed) == c.text and streamed[-1].finish_reason == "stop"
    # stop token ids: the token is kept and named
    t = full.token_ids[2]
    c = llm.generate("hello world", SamplingParams(max_tokens=10, stop_token_ids=[t]))[0].outputs[0]
    assert c.finish_reason == "stop" and c.stop_reason == t and c.token_ids[-1] == t


def test_logprobs(llm):
    c = llm.generate([[5, 6, 7]], SamplingParams(max_tokens=4, ignore_eos=True, logprobs=2))[0].outputs[0]
    assert len(c.logprobs) == 4
    for tok, entry in zip(c.token_ids, c.logprobs):
        assert tok in entry and entry[tok].rank == 1  # greedy: the sampled token is the most likely
        assert len(entry) == 2 and entry[tok].decoded_token == llm.tokenizer.decode([tok])
    assert c.cumulative_logprob == pytest.approx(sum(e[t].logprob for t, e in zip(c.token_ids, c.logprobs)))


def test_chat_sampling_params_keyword(llm):
    messages = [{"role": "user", "content": "hello world"}]
    reply = llm.chat(messages, sampling_params=P)
    assert reply.outputs[0].token_ids == llm.chat(messages, P).token_ids
    assert [o.token_ids for o in llm.chat([messages, messages], sampling_params=P)] == [reply.token_ids] * 2


def test_sampling_params_vllm_names_and_validation():
    p = SamplingParams(max_tokens=5, stop="x", stop_token_ids=[3], n=2, top_k=0, min_p=0.1, seed=1,
                       presence_penalty=0.5, frequency_penalty=0.5, repetition_penalty=1.1, logprobs=1,
                       ignore_eos=True, temperature=0.5, top_p=0.9)
    assert (p.max_tokens, p.max_new_tokens, p.stop, p.stop_token_ids, p.n, p.top_k) == (5, 5, ("x",), (3,), 2, 0)
    assert SamplingParams(**p.__dict__) == p  # the server's per-sample copies
    for kw, name in (({"max_tokens": -1}, "max_tokens"), ({"n": 0}, "n"), ({"stop": [""]}, "stop"),
                     ({"min_p": 2}, "min_p"), ({"stop_token_ids": [-1]}, "stop_token_ids")):
        with pytest.raises(ValueError, match=f"^{name} = "):
            SamplingParams(**kw)


def test_old_names_warn_and_keep_working(llm):
    with pytest.warns(DeprecationWarning, match="max_tokens"):
        old = SamplingParams(max_new_tokens=6, ignore_eos=True)
    assert old.max_tokens == 6 and old == P
    with pytest.warns(DeprecationWarning, match="generate_ids"):
        ids = llm.generate([[5, 6, 7]], old)  # the old token-level return, one more release
    assert ids == llm.generate_ids([[5, 6, 7]], P)
    with pytest.warns(DeprecationWarning, match="sampling_params"):
        out = llm.chat([{"role": "user", "content": "hello"}], params=P)
    assert isinstance(out, RequestOutput)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the vLLM spelling warns about nothing
        assert isinstance(llm.generate([[5, 6, 7]], P)[0], RequestOutput)
    with pytest.raises(ValueError, match="give one"):
        SamplingParams(max_tokens=3, max_new_tokens=4)


def test_every_parameter_is_documented():
    doc = inspect.getdoc(LLM)
    for name in inspect.signature(LLM.__init__).parameters:
        if name != "self":
            assert f"    {name}:" in doc, name
    sdoc = inspect.getdoc(SamplingParams)
    for name in ("max_tokens", "stop", "stop_token_ids", "n", "temperature", "top_p", "top_k", "min_p", "seed",
                 "presence_penalty", "frequency_penalty", "repetition_penalty", "logprobs", "ignore_eos"):
        assert f"{name}:" in sdoc, name
    for method in (LLM.generate, LLM.chat, LLM.stream, LLM.generate_ids):
        for name in inspect.signature(method).parameters:
            if name != "self":
                assert f"{name}:" in inspect.getdoc(method), (method.__name__, name)
