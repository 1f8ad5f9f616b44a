"""Request bodies fuzzed (hypothesis, bounded examples) against the in-process server: any JSON body, and bodies
built from the real field names with values of any type, get a 2xx or a 4xx in OpenAI's error shape -- never a 500,
never a plain-text error. Also in-process: a request that can never fit the KV cache is refused with a 400 at
admission (not failed mid-stream), and the body limit stops reading a chunked body at the limit."""
from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

pytest.importorskip("fastapi", reason="the `serve` extra")
pytest.importorskip("uvicorn", reason="the `serve` extra")
pytest.importorskip("prometheus_client", reason="the `serve` extra")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from modelgen import LLM  # noqa: E402
from modelgen.runtime.server import app as server_app  # noqa: E402
from modelgen.runtime.server.request_body import BodyLimit  # noqa: E402
# base, ckpt, llm: that module's fixtures (the in-process app over the tiny LLM), instantiated again for this one
from tests.test_server_fields import assert_openai_error, base, ckpt, llm, request, running  # noqa: E402, F401


_SCALARS = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
            | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
            | st.sampled_from(["tiny", "hello world", "false", "true", "user", "w9", "", "text"]))
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
_FIELDS = sorted(server_app.SERVED_FIELDS["completions"] | server_app.SERVED_FIELDS["chat"]
                 | set(server_app.REFUSED_FIELDS))
# Mostly short generations: a fuzzed body that is valid runs for real, and max_tokens absent means up to 256 tokens.
_MAX_TOKENS = st.integers(min_value=-2, max_value=4) | _SCALARS
_MESSAGES = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", 5]),
                                            "content": st.text(max_size=20) | _JSON}), min_size=0, max_size=3)
_BODIES = (
    _JSON
    | st.dictionaries(st.sampled_from(_FIELDS), _JSON, max_size=6)
    | st.fixed_dictionaries({"model": st.just("tiny"), "max_tokens": _MAX_TOKENS},
                            optional={"prompt": _JSON | st.text(max_size=30), "messages": _MESSAGES,
                                      "n": st.integers(-1, 3) | _SCALARS, "stream": _SCALARS,
                                      "stop": _JSON, "seed": _SCALARS, "temperature": _SCALARS,
                                      "logprobs": _SCALARS, "top_logprobs": _SCALARS, "logit_bias": _JSON,
                                      "stream_options": _JSON, "top_p": _SCALARS, "ignore_eos": _SCALARS})
)


def _check(status: int, body) -> None:
    event(f"HTTP {status}")  # the mix of answers, for `pytest --hypothesis-show-statistics`
    assert status < 500, (status, body)
    if status >= 400:
        assert_openai_error(status, body, status)
    elif isinstance(body, str):  # an SSE stream: every event is JSON, none an error
        events = [line[6:] for line in body.splitlines() if line.startswith("data: ")]
        assert events and events[-1] == "[DONE]", body[-300:]
        for e in events[:-1]:
            assert "error" not in json.loads(e), e
    else:
        assert body.get("choices") is not None, body


# A valid body with up to three fields set to anything: most answers are then 2xx or a 400 naming that field.
_VALID = {False: {"model": "tiny", "prompt": "hello world", "max_tokens": 3},
          True: {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}}
_SMALL = _MAX_TOKENS | st.sampled_from([True, False, None, 0, 1, 2, 0.5, [], {}, ["w9"], {"include_usage": True}])
_MUTATIONS = st.dictionaries(st.sampled_from(_FIELDS), _SMALL | _JSON, max_size=2)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(chat=st.booleans(), body=_BODIES | _MUTATIONS.map(lambda m: ("mutated", m)))
def test_any_json_body_gets_2xx_or_openai_4xx(base, chat, body):
    if isinstance(body, tuple) and body[:1] == ("mutated",):
        body = {**_VALID[chat], **body[1]}
    path = "/v1/chat/completions" if chat else "/v1/completions"
    raw = json.dumps(body, allow_nan=True).encode()  # NaN / Infinity too: Python's json reads them
    status, got = request(base, path, raw)
    _check(status, got)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_any_bytes_get_2xx_or_openai_4xx(base, raw):
    status, got = request(base, "/v1/completions", raw)
    _check(status, got)


# ------------------------------------------------------------------------------------------------ KV admission
def test_request_that_can_never_fit_the_cache_gets_400(ckpt):
    """8 blocks of 16 tokens: 5 prompt + 200 new tokens (under max_model_len 256) need 13 blocks. Refused with a
    400 before it runs; a request that fits is served beside it."""
    small = LLM(ckpt, max_num_seqs=2, num_blocks=8, progress=False)
    with running(server_app.create_app(small, "tiny")) as url:
        status, got = request(url, "/v1/completions", {"model": "tiny", "prompt": "hello world w9 w10 w11",
                                                        "max_tokens": 200})
        assert_openai_error(status, got, 400, "max_tokens")
        assert "could never run" in got["error"]["message"] and "8" in got["error"]["message"], got
        status, got = request(url, "/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 20,
                                                        "temperature": 0})
        assert status == 200 and got["choices"][0]["finish_reason"] in ("length", "stop"), got
        health = json.load(urllib.request.urlopen(url + "/health"))
        assert health["kv_blocks_free"] == health["kv_blocks_total"] == 8 and health["requests_in_flight"] == 0


def test_engine_refusal_of_a_request_is_a_400(base, llm, monkeypatch):
    """A ValueError from the engine for a request (its own fault, e.g. a cache it can never fit) reaches the
    client as a 400 (JSON) or an invalid_request_error event (stream), not as a server error."""
    def refuse(*args):
        raise ValueError("request refused by the engine: it can never fit")

    monkeypatch.setattr(llm, "_step", refuse)
    status, got = request(base, "/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 2})
    assert_openai_error(status, got, 400)
    assert got["error"]["type"] == "invalid_request_error" and "never fit" in got["error"]["message"], got
    status, got = request(base, "/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 2,
                                                     "stream": True})
    assert status == 200 and isinstance(got, str), got
    error = json.loads(got.split("data: ", 1)[1])
    assert error["error"]["type"] == "invalid_request_error" and "never fit" in error["error"]["message"], got
    monkeypatch.undo()
    assert request(base, "/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 2})[0] == 200


# ------------------------------------------------------------------------------------------------ body limit
def test_body_limit_stops_reading_a_chunked_body_at_the_limit():
    """A body sent in 64 KiB chunks without Content-Length: the middleware stops reading at the first chunk past
    the limit, answers 413 in OpenAI's shape, and never calls the app."""
    chunk = b"x" * 65536
    calls = {"receive": 0, "app": 0}
    sent = []

    async def receive():
        calls["receive"] += 1
        return {"type": "http.request", "body": chunk, "more_body": True}  # an endless body

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        calls["app"] += 1

    limit = 1_000_000
    middleware = BodyLimit(app, limit, lambda e: server_app._error(e.status, str(e), None, "invalid_request_error",
                                                                   e.code))
    asyncio.run(middleware({"type": "http", "headers": [], "method": "POST", "path": "/v1/completions"},
                           receive, send))
    assert calls == {"receive": limit // len(chunk) + 1, "app": 0}, calls
    assert sent[0]["status"] == 413
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert_openai_error(413, body, 413)
    assert body["error"]["code"] == "request_too_large"


def test_body_limit_replays_the_body_to_the_app():
    """Under the limit the app reads the whole body in one message, then the client's own messages."""
    parts = [{"type": "http.request", "body": b'{"a": ', "more_body": True},
             {"type": "http.request", "body": b"1}", "more_body": False}, {"type": "http.disconnect"}]
    got = []

    async def receive():
        return parts.pop(0)

    async def app(scope, receive, send):
        got.append(await receive())
        got.append(await receive())

    async def send(message):
        raise AssertionError(f"the middleware answered: {message}")

    asyncio.run(BodyLimit(app, 100, None)({"type": "http", "headers": []}, receive, send))
    assert got == [{"type": "http.request", "body": b'{"a": 1}', "more_body": False}, {"type": "http.disconnect"}]
