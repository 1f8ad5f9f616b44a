"""Every field of OpenAI's request schemas (read from the installed ``openai`` package) is served or refused with a 400
naming it, on both endpoints -- never silently dropped; the served ones do what they say (penalties, logit_bias,
logprobs / top_logprobs, stop_token_ids, stream_options.include_usage, min_p); unknown fields, another model,
unknown routes, wrong methods and server errors all answer in OpenAI's error shape; a checkpoint without a chat
template gets a 400 naming the file and --chat-template.

The app runs in-process (uvicorn in a thread, over the module's tiny LLM), driven with urllib and the openai
client."""
from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("fastapi", reason="the `serve` extra")
pytest.importorskip("uvicorn", reason="the `serve` extra")
pytest.importorskip("prometheus_client", reason="the `serve` extra")
openai = pytest.importorskip("openai", reason="the `test` extra")

from openai.types import completion_create_params as completion_types  # noqa: E402
from openai.types.chat import completion_create_params as chat_types  # noqa: E402

from modelgen import LLM, SamplingParams  # noqa: E402
from modelgen.runtime.server import app as server_app  # noqa: E402
from tests.test_python_api import make_api_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def ckpt(llama_checkpoint, tmp_path_factory):
    return make_api_checkpoint(llama_checkpoint, tmp_path_factory)


@pytest.fixture(scope="module")
def llm(ckpt):
    return LLM(ckpt, max_num_seqs=8, progress=False)


@contextlib.contextmanager
def running(app):
    """``app`` served by uvicorn in a thread on a free port; yields the base URL."""
    import uvicorn

    sock = server_app.bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        assert time.time() < deadline and thread.is_alive(), "in-process server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.fixture(scope="module")
def base(llm):
    with running(server_app.create_app(llm, "tiny")) as url:
        yield url


@pytest.fixture
def client(base):
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)


def request(base, path, body=None, method=None, headers=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read().decode(), e.code
    try:
        return status, json.loads(raw)
    except json.JSONDecodeError:
        return status, raw  # an SSE stream


def assert_openai_error(status, body, want_status, param="any"):
    assert status == want_status, (status, body)
    assert isinstance(body, dict) and set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["message"], body
    if param != "any":
        assert body["error"]["param"] == param, body


# ------------------------------------------------------------------------------------------- the field tables
# Every field of OpenAI's request schema -> (a value that asks for something, "served" | "refused"). A field the
# openai package adds later is missing here and fails test_table_covers_openai_schema until it is classified (and
# the server either serves it or refuses it: test_every_field_served_or_refused sends each one).
COMPLETION_CASES = {
    "best_of": (3, "refused"),
    "echo": (True, "refused"),
    "frequency_penalty": (0.5, "served"),
    "logit_bias": ({"9": 5}, "served"),
    "logprobs": (2, "served"),
    "max_tokens": (3, "served"),
    "model": ("tiny", "served"),
    "n": (2, "served"),
    "presence_penalty": (0.5, "served"),
    "prompt": ("hello world", "served"),
    "seed": (3, "served"),
    "stop": (["w9"], "served"),
    "stream": (True, "served"),
    "stream_options": ({"include_usage": True}, "served"),
    "suffix": (" and then", "refused"),
    "temperature": (0.5, "served"),
    "top_p": (0.9, "served"),
    "user": ("user-1", "served"),
}
CHAT_CASES = {
    "audio": ({"voice": "alloy", "format": "wav"}, "refused"),
    "frequency_penalty": (0.5, "served"),
    "function_call": ("auto", "refused"),
    "functions": ([{"name": "f", "parameters": {}}], "refused"),
    "logit_bias": ({"9": 5}, "served"),
    "logprobs": (True, "served"),
    "max_completion_tokens": (3, "served"),
    "max_tokens": (3, "served"),
    "messages": ([{"role": "user", "content": "hello"}], "served"),
    "metadata": ({"team": "a"}, "served"),
    "modalities": (["text", "audio"], "refused"),
    "model": ("tiny", "served"),
    "moderation": ({"model": "omni-moderation-latest"}, "refused"),
    "n": (2, "served"),
    "parallel_tool_calls": (True, "refused"),
    "prediction": ({"type": "content", "content": "hello"}, "refused"),
    "presence_penalty": (0.5, "served"),
    "prompt_cache_key": ("k1", "served"),
    "prompt_cache_options": ({"ttl": "1h"}, "refused"),
    "prompt_cache_retention": ("24h", "refused"),
    "reasoning_effort": ("low", "refused"),
    "response_format": ({"type": "json_object"}, "refused"),
    "safety_identifier": ("u-1", "served"),
    "seed": (3, "served"),
    "service_tier": ("flex", "refused"),
    "stop": (["w9"], "served"),
    "store": (True, "refused"),
    "stream": (True, "served"),
    "stream_options": ({"include_usage": True}, "served"),
    "temperature": (0.5, "served"),
    "tool_choice": ("auto", "refused"),
    "tools": ([{"type": "function", "function": {"name": "f", "parameters": {}}}], "refused"),
    "top_logprobs": (2, "served"),
    "top_p": (0.9, "served"),
    "user": ("user-1", "served"),
    "verbosity": ("low", "refused"),
    "web_search_options": ({}, "refused"),
}
# What a field needs beside it to be valid (top_logprobs needs logprobs, stream_options needs stream).
COMPANIONS = {"top_logprobs": {"logprobs": True}, "stream_options": {"stream": True}}
ENDPOINTS = {
    "completions": ("/v1/completions", completion_types.CompletionCreateParamsBase, COMPLETION_CASES,
                    {"model": "tiny", "prompt": "hello world", "max_tokens": 3, "temperature": 0}),
    "chat": ("/v1/chat/completions", chat_types.CompletionCreateParamsBase, CHAT_CASES,
             {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3,
              "temperature": 0}),
}


def openai_fields(schema) -> set[str]:
    return set(schema.__annotations__) | {"stream"}  # `stream` lives on the Streaming / NonStreaming subclasses


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
def test_table_covers_openai_schema(endpoint):
    _, schema, cases, _ = ENDPOINTS[endpoint]
    fields = openai_fields(schema)
    assert fields == set(cases), f"fields to classify: {sorted(fields ^ set(cases))}"
    # and the server's own tables classify each of them
    known = server_app.SERVED_FIELDS[endpoint] | set(server_app.REFUSED_FIELDS)
    assert fields <= known, sorted(fields - known)


@pytest.mark.parametrize("endpoint, field", [(e, f) for e in ENDPOINTS for f in ENDPOINTS[e][2]])
def test_every_field_served_or_refused(base, endpoint, field):
    path, _, cases, minimal = ENDPOINTS[endpoint]
    value, expected = cases[field]
    body = {**minimal, **COMPANIONS.get(field, {}), field: value}
    status, got = request(base, path, body)
    if expected == "served":
        assert status == 200, (field, got)
    else:
        assert_openai_error(status, got, 400, field)
        assert field in got["error"]["message"]


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
def test_unknown_field_refused(base, endpoint):
    path, _, _, minimal = ENDPOINTS[endpoint]
    status, got = request(base, path, {**minimal, "guided_json": {"type": "object"}})
    assert_openai_error(status, got, 400, "guided_json")


@pytest.mark.parametrize("endpoint, field, value", [
    ("completions", "echo", False), ("completions", "best_of", 1), ("completions", "suffix", ""),
    ("chat", "response_format", {"type": "text"}), ("chat", "tools", []), ("chat", "tool_choice", "none"),
    ("chat", "store", False), ("chat", "modalities", ["text"]), ("chat", "audio", None),
])
def test_no_op_values_of_refused_fields_accepted(base, endpoint, field, value):
    path, _, _, minimal = ENDPOINTS[endpoint]
    status, got = request(base, path, {**minimal, field: value})
    assert status == 200, got


# ------------------------------------------------------------------------------------------ the served fields
def test_penalties_and_logit_bias_equal_engine(client, llm):
    prompt = "hello world w9"
    for extra in ({"frequency_penalty": 2.0}, {"presence_penalty": 2.0}, {"repetition_penalty": 1.8},
                  {"logit_bias": {"20": 100}}):
        body = {k: v for k, v in extra.items() if k in ("frequency_penalty", "presence_penalty")}
        r = client.completions.create(model="tiny", prompt=prompt, max_tokens=12, temperature=0, **body,
                                      extra_body={k: v for k, v in extra.items() if k not in body})
        p = {k: ({int(t): b for t, b in v.items()} if k == "logit_bias" else v) for k, v in extra.items()}
        want = llm.complete(prompt, SamplingParams(max_new_tokens=12, **p))[0]
        assert r.choices[0].text == want.text, extra
    plain = llm.complete(prompt, SamplingParams(max_new_tokens=12))[0].token_ids
    assert llm.complete(prompt, SamplingParams(max_new_tokens=12, logit_bias={20: 100}))[0].token_ids == [20] * 12
    assert llm.complete(prompt, SamplingParams(max_new_tokens=12, frequency_penalty=2.0))[0].token_ids != plain \
        or len(set(plain)) == len(plain)  # a penalty changes a greedy output that repeats itself


def test_completion_logprobs_match_the_model(client, llm):
    import torch

    r = client.completions.create(model="tiny", prompt="hello world w9", max_tokens=5, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    prompt = llm.tokenizer.encode("hello world w9")
    ids = llm.complete("hello world w9", SamplingParams(max_new_tokens=5))[0].token_ids
    want = llm.score(prompt + ids).float().log_softmax(-1)[len(prompt) - 1: -1]
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 5
    for k, t in enumerate(ids):
        assert lp.token_logprobs[k] == pytest.approx(float(want[k, t]), abs=1e-4)
        top = lp.top_logprobs[k]
        assert 3 <= len(top) <= 4 and max(top.values()) == pytest.approx(float(want[k].max()), abs=1e-4)
        assert sorted(top.values(), reverse=True)[:3] == pytest.approx(torch.topk(want[k], 3).values.tolist(),
                                                                        abs=1e-4)
    assert lp.text_offset == sorted(lp.text_offset)


def test_chat_logprobs_and_streaming_logprobs(client):
    messages = [{"role": "user", "content": "hello world"}]
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=4, temperature=0, logprobs=True,
                                       top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 4
    for item in content:
        assert len(item.top_logprobs) == 2 and item.logprob <= 0
        assert item.logprob == pytest.approx(item.top_logprobs[0].logprob)  # greedy: the sampled one is the top one
    assert "".join(c.token for c in content).replace(" ", "") == r.choices[0].message.content.replace(" ", "")
    stream = client.chat.completions.create(model="tiny", messages=messages, max_tokens=4, temperature=0,
                                            logprobs=True, top_logprobs=2, stream=True)
    streamed = [e for c in stream if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in content])


def test_stop_token_ids(client, llm):
    ids = llm.complete("hello world w9", SamplingParams(max_new_tokens=6, ignore_eos=True))[0].token_ids
    r = client.completions.create(model="tiny", prompt="hello world w9", max_tokens=6, temperature=0,
                                  extra_body={"stop_token_ids": [ids[2]], "ignore_eos": False})
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == ids.index(ids[2]) + 1


def test_stream_options_include_usage(client):
    for create, kw in ((client.completions.create, {"prompt": "hello world"}),
                       (client.chat.completions.create, {"messages": [{"role": "user", "content": "hello"}]})):
        chunks = list(create(model="tiny", max_tokens=5, temperature=0, stream=True,
                             stream_options={"include_usage": True}, extra_body={"ignore_eos": True}, **kw))
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
        assert chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + 5
        assert all(c.usage is None for c in chunks[:-1])
        plain = list(create(model="tiny", max_tokens=5, temperature=0, stream=True, **kw))
        assert all(c.usage is None for c in plain) and plain[-1].choices


def test_min_p_and_bad_values_named(base, client):
    r = client.completions.create(model="tiny", prompt="hello", max_tokens=4, temperature=1.0, seed=1,
                                  extra_body={"min_p": 1.0})
    greedy = client.completions.create(model="tiny", prompt="hello", max_tokens=4, temperature=0)
    assert r.choices[0].text == greedy.choices[0].text  # min_p 1 keeps only the most likely token
    for field, value in (("frequency_penalty", 3), ("logprobs", 99), ("min_p", 2), ("repetition_penalty", 0),
                         ("logit_bias", {"99999": 1}), ("stop_token_ids", [-1]), ("stream_options", {"x": 1})):
        body = {"model": "tiny", "prompt": "hello", "max_tokens": 2, field: value}
        if field == "stream_options":
            body["stream"] = True
        status, got = request(base, "/v1/completions", body)
        assert_openai_error(status, got, 400)
        assert got["error"]["param"].startswith(field), got
    status, got = request(base, "/v1/completions", {"model": "tiny", "prompt": "hello",
                                                    "stream_options": {"include_usage": True}})
    assert_openai_error(status, got, 400, "stream_options")  # without stream
    status, got = request(base, "/v1/chat/completions", {"model": "tiny", "top_logprobs": 2,
                                                         "messages": [{"role": "user", "content": "hi"}]})
    assert_openai_error(status, got, 400, "top_logprobs")  # without logprobs: true


# ------------------------------------------------------------------------------------------------ error shapes
def test_unknown_model_is_404(base, client):
    status, got = request(base, "/v1/completions", {"model": "gpt-4", "prompt": "hello"})
    assert_openai_error(status, got, 404, "model")
    assert "gpt-4" in got["error"]["message"] and got["error"]["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "hi"}])


def test_404_405_and_500_in_openai_shape(base, llm, monkeypatch):
    assert_openai_error(*request(base, "/v1/nothing", {"x": 1}), 404)
    assert_openai_error(*request(base, "/v1/completions", method="GET"), 405)
    assert_openai_error(*request(base, "/v1/models", {"x": 1}), 405)

    def broken(*a, **k):
        raise RuntimeError("kaput")

    monkeypatch.setattr(type(llm.tokenizer), "encode", broken)
    status, got = request(base, "/v1/completions", {"model": "tiny", "prompt": "hello"})
    assert_openai_error(status, got, 500)
    assert got["error"]["type"] == "server_error" and "kaput" in got["error"]["message"]


def test_no_chat_template_is_400_naming_file_and_flag(llm, ckpt, tmp_path):
    d = tmp_path / "bare"
    shutil.copytree(ckpt, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    del cfg["chat_template"]
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    bare = LLM(d, max_num_seqs=2, progress=False)
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3, "temperature": 0}
    with running(server_app.create_app(bare, "tiny")) as url:
        status, got = request(url, "/v1/chat/completions", chat)
        assert_openai_error(status, got, 400, "messages")
        assert str(d / "tokenizer_config.json") in got["error"]["message"]
        assert "--chat-template FILE|STRING" in got["error"]["message"]
        assert request(url, "/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 2})[0] == 200
    from tests.test_python_api import TEMPLATE

    (tmp_path / "t.jinja").write_text(TEMPLATE)
    for value in (str(tmp_path / "t.jinja"), TEMPLATE):
        text, source = server_app.load_chat_template(value)
        bare2 = LLM(d, max_num_seqs=2, progress=False)
        with running(server_app.create_app(bare2, "tiny", chat_template=text, chat_template_source=source)) as url:
            status, got = request(url, "/v1/chat/completions", chat)
            assert status == 200, got
            want = llm.chat(chat["messages"], SamplingParams(max_new_tokens=3)).text
            assert got["choices"][0]["message"]["content"] == want
    with pytest.raises(ValueError, match="neither a file nor a Jinja template"):
        server_app.load_chat_template(str(tmp_path / "missing.jinja"))
