"""Hostile requests against `modelgen serve` (a subprocess, as deployed): each one is refused or bounded in its own
thread, with an OpenAI-shaped error, while ``/health`` keeps answering within a second; after template bombs the
server's RSS comes back to within a bounded margin. Issue 27: long stop strings, huge bodies, prompts tokenized
on the event loop, chat-template bombs (bytes, format widths, time, memory kept by a failed render,
``raise_exception``), poisoned sampling parameters, deeply nested / invalid JSON, strings for booleans, dropped
non-streaming clients, SIGTERM under load, a checkpoint without tokenizer.json."""
from __future__ import annotations

import concurrent.futures
import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

pytest.importorskip("fastapi", reason="the `serve` extra")
pytest.importorskip("uvicorn", reason="the `serve` extra")
pytest.importorskip("prometheus_client", reason="the `serve` extra")
openai = pytest.importorskip("openai", reason="the `test` extra")

from tests.test_python_api import TEMPLATE, make_api_checkpoint  # noqa: E402
from tests.test_server import _health, _start, _stop, _wait_idle  # noqa: E402
from tests.test_server_fields import assert_openai_error, request  # noqa: E402

BODY_LIMIT = 1_000_000  # --max-body-bytes of the server under test
HEALTH_WITHIN = 1.0  # seconds: the longest /health may take while a hostile request is in flight
RSS_MARGIN = 150e6  # bytes: how far above its warmed-up RSS the server may stay after the bombs

# The checkpoint's own template, except for messages that ask for a bomb: one server covers every bomb.
BOMB_TEMPLATE = (
    "{%- set c = messages[-1]['content'] -%}"
    "{%- if c == 'bomb:bytes' -%}{{ ('x' * 10**6).encode() * 2500 }}"
    "{%- elif c == 'bomb:widths' -%}{{ ('%9999999s' * 250) % (('x',) * 250) }}"
    "{%- elif c == 'bomb:star-widths' -%}{{ ('%*s' * 250) % ((9999999, 'x') * 250) }}"
    "{%- elif c == 'bomb:time' -%}{% set s = 'x' * 90000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}"
    "{%- elif c == 'bomb:memory' -%}{% set s = 'x' * 7000000 %}{% set t = s ~ 'y' %}"
    "{{ raise_exception('refused after building ' ~ (t | length) ~ ' characters') }}"
    "{%- elif c == 'bomb:raise' -%}{{ raise_exception('this template refuses the request') }}"
    "{%- else -%}" + TEMPLATE + "{%- endif -%}"
)
BOMBS = {  # message -> what the one-line error says
    "bomb:bytes": "the '*' operator would produce about 2500000000 characters",
    "bomb:widths": "width 2499999750 in the format string",
    "bomb:star-widths": "numeric argument 9999999 (width arguments 250",
    "bomb:time": "render time limit",
    "bomb:memory": "chat template raised an error: refused after building 7000001 characters",
    "bomb:raise": "chat template raised an error: this template refuses the request",
}


@pytest.fixture(scope="module")
def ckpt(llama_checkpoint, tmp_path_factory):
    d = make_api_checkpoint(llama_checkpoint, tmp_path_factory)
    config = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": BOMB_TEMPLATE}))
    return d


def _rss(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@pytest.fixture(scope="module")
def served(ckpt):
    """The server, warmed up (a completion, a chat, a stream served), and its RSS then."""
    proc, base = _start(ckpt, "--max-body-bytes", str(BODY_LIMIT), "--shutdown-timeout", "1")
    for body in ({"model": "tiny", "prompt": "hello", "max_tokens": 4}, _chat("hello"),
                 {"model": "tiny", "prompt": "hello", "max_tokens": 4, "stream": True}):
        request(base, "/v1/chat/completions" if "messages" in body else "/v1/completions", body)
    yield proc, base, _rss(proc.pid)
    _stop(proc)


@pytest.fixture(scope="module")
def base(served):
    return served[1]


@pytest.fixture(autouse=True)
def rss_comes_back(request):
    """After every test on the shared server, its RSS is within RSS_MARGIN of the warmed-up value."""
    yield
    if "served" in request.fixturenames:
        proc, _, warm = request.getfixturevalue("served")
        grown = _rss(proc.pid) - warm
        assert grown < RSS_MARGIN, f"server RSS {grown / 1e6:.0f} MB above its warmed-up value"


@contextlib.contextmanager
def health_answers(base: str, within: float = HEALTH_WITHIN):
    """/health polled every 50 ms from a thread while the block runs; each answer must come within ``within`` s."""
    latencies: list[float] = []
    failures: list[str] = []
    done = threading.Event()

    def poll():
        while not done.is_set():
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(base + "/health", timeout=10) as r:
                    if json.load(r)["status"] != "ok":
                        failures.append("status not ok")
            except Exception as e:  # noqa: BLE001 (any failure to answer is what this records)
                failures.append(f"{type(e).__name__}: {e}")
            latencies.append(time.perf_counter() - t0)
            done.wait(0.05)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    time.sleep(0.1)  # a first answer before the hostile request starts
    try:
        yield latencies
    finally:
        done.set()
        thread.join(timeout=15)
    assert not failures, failures
    assert latencies and max(latencies) < within, f"/health took up to {max(latencies):.2f} s"


def _chat(content: str, **extra) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": 3, **extra}


def _ok(base: str) -> None:
    """The server still serves a plain request."""
    status, got = request(base, "/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 2,
                                                     "temperature": 0})
    assert status == 200 and got["choices"], got


# ------------------------------------------------------------------------------------------------ body and JSON
def test_huge_body_gets_413_before_it_is_sent(base):
    """A 50 MB Content-Length is answered 413 from the headers alone (the client has not sent a byte of body)."""
    host, port = base.removeprefix("http://").split(":")
    with health_answers(base), socket.create_connection((host, int(port)), timeout=10) as s:
        t0 = time.perf_counter()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 50000000\r\n\r\n")
        raw = b""
        while b"\r\n\r\n" not in raw or not raw.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            raw += chunk
        elapsed = time.perf_counter() - t0
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), raw[:200]
    assert_openai_error(413, json.loads(payload), 413)
    assert "--max-body-bytes" in json.loads(payload)["error"]["message"] and elapsed < 5
    _ok(base)


def test_body_just_over_the_limit_gets_413(base):
    body = json.dumps({"model": "tiny", "prompt": "hello " * (BODY_LIMIT // 6 + 10), "max_tokens": 2}).encode()
    assert len(body) > BODY_LIMIT
    with health_answers(base):
        status, got = request(base, "/v1/completions", body)
    assert_openai_error(status, got, 413)
    _ok(base)


@pytest.mark.parametrize("body, what", [
    (b"{not json", "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "deeper than"),  # json.loads alone raises RecursionError here
    (json.dumps({"model": "tiny", "prompt": "hello", "user": json.loads("[" * 40 + "]" * 40)}).encode(),
     "deeper than"),
    (b'{"model": "tiny", "prompt": "hello", "seed": ' + b"9" * 5000 + b"}", "not valid JSON"),  # int over 4300 digits
    (b'"just a string"', "must be a JSON object"),
    (b"\xff\xfe{}", "not valid JSON"),
])
def test_malformed_bodies_get_openai_400(base, body, what):
    with health_answers(base):
        status, got = request(base, "/v1/completions", body)
    assert_openai_error(status, got, 400)
    assert what in got["error"]["message"] and "\n" not in got["error"]["message"], got


@pytest.mark.parametrize("endpoint, field, value", [
    ("completions", "stream", "false"),
    ("completions", "echo", "false"),
    ("completions", "ignore_eos", "false"),
    ("chat", "stream", "false"),
    ("chat", "logprobs", "false"),
    ("chat", "ignore_eos", "true"),
    ("chat", "store", "false"),
    ("chat", "stream_options", {"include_usage": "false"}),
])
def test_strings_for_booleans_refused(base, endpoint, field, value):
    """``"false"`` is a (truthy) string, not false: refused by name rather than taken as true."""
    body = {**_chat("hello"), field: value} if endpoint == "chat" else \
        {"model": "tiny", "prompt": "hello", "max_tokens": 2, field: value}
    if field == "stream_options":
        body["stream"] = True
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    status, got = request(base, path, body)
    assert_openai_error(status, got, 400)
    assert got["error"]["param"].split(".")[0] == field, got


# ------------------------------------------------------------------------------------------------ prompts and stops
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_long_prompt_refused_before_tokenizing(base, endpoint):
    """900k characters (under the body limit) cannot fit 256 tokens: refused by length before the tokenizer
    runs, at once, the event loop never blocked."""
    text = "hello " * 150_000
    body = _chat(text) if endpoint == "chat" else {"model": "tiny", "prompt": [text, "hello"], "max_tokens": 2}
    with health_answers(base):
        t0 = time.perf_counter()
        status, got = request(base, "/v1/chat/completions" if endpoint == "chat" else "/v1/completions", body)
        elapsed = time.perf_counter() - t0
    assert_openai_error(status, got, 400, "messages" if endpoint == "chat" else "prompt")
    assert "refused before tokenizing" in got["error"]["message"] and elapsed < 5, (elapsed, got)
    _ok(base)


@pytest.mark.parametrize("stop, what", [
    (["x" * 1025], "at most 1024 characters"),
    (["a", "b", "c", "d", "e"], "up to 4"),
    ("x" * 4_000_00, "at most 1024 characters"),  # the 400k-character stop string that froze the server
    ([""], "non-empty"),
    ([5], "non-empty strings"),
])
def test_stop_strings_bounded(base, stop, what):
    with health_answers(base):
        status, got = request(base, "/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 2,
                                                         "stop": stop})
    assert_openai_error(status, got, 400, "stop")
    assert what in got["error"]["message"] and len(got["error"]["message"]) < 1000, got


def test_longest_stop_strings_stream_without_stalling(base):
    """Four 1024-character stop strings that almost match what is generated (every token extends a partial
    match): 200 streamed tokens, /health answering throughout, the text complete (no stop matched)."""
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    plain = client.completions.create(model="tiny", prompt="hello world", max_tokens=200, temperature=0,
                                      extra_body={"ignore_eos": True}).choices[0].text
    stops = [(plain + " ") * 4 for _ in range(4)]
    stops = [s[: 1023] + "\x00" for s in stops]  # its first 1023 characters match, then it cannot
    with health_answers(base):
        stream = client.completions.create(model="tiny", prompt="hello world", max_tokens=200, temperature=0,
                                           stream=True, stop=stops, extra_body={"ignore_eos": True})
        chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == plain
    assert chunks[-1].choices[0].finish_reason == "length"


# ------------------------------------------------------------------------------------------------ chat templates
@pytest.mark.parametrize("bomb", list(BOMBS))
def test_template_bombs_refused_while_health_answers(served, bomb):
    proc, base, _ = served
    _ok(base)
    request(base, "/v1/chat/completions", _chat("hello"))  # warm: the template compiled, the prep threads started
    before = _rss(proc.pid)
    with health_answers(base):
        t0 = time.perf_counter()
        status, got = request(base, "/v1/chat/completions", _chat(bomb))
        elapsed = time.perf_counter() - t0
    assert_openai_error(status, got, 400, "messages")
    message = got["error"]["message"]
    assert BOMBS[bomb] in message and "tokenizer_config.json" in message and "\n" not in message, got
    assert elapsed < 5, elapsed  # the 1 s render limit, plus the request's own overheads
    assert _rss(proc.pid) - before < RSS_MARGIN, (_rss(proc.pid) - before) / 1e6
    _ok(base)


def test_failed_renders_release_their_memory(served):
    """Ten renders that each build 14 MB of strings and then fail: RSS ends within the margin, not 10 x 14 MB up
    (the exception's traceback kept each failed render's frames alive)."""
    proc, base, _ = served
    request(base, "/v1/chat/completions", _chat("bomb:memory"))
    before = _rss(proc.pid)
    for _ in range(10):
        status, got = request(base, "/v1/chat/completions", _chat("bomb:memory"))
        assert_openai_error(status, got, 400, "messages")
    grown = _rss(proc.pid) - before
    assert grown < 60e6, f"RSS grew {grown / 1e6:.0f} MB over 10 failed renders"


def test_server_and_cli_share_the_template_limits(base, ckpt):
    """`modelgen run` on the same checkpoint fails the same bomb with the same message."""
    import io

    from modelgen.cli import main

    _, got = request(base, "/v1/chat/completions", _chat("bomb:bytes"))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(["run", "--checkpoint", str(ckpt), "--prompt", "bomb:bytes", "--max-new-tokens", "2"]) == 1
    assert got["error"]["message"] in err.getvalue(), (got, err.getvalue())


# ------------------------------------------------------------------------------------------------ sampling
@pytest.mark.parametrize("extra, param", [
    ({"temperature": 1e-300}, "temperature"),
    ({"temperature": 5e-4}, "temperature"),
    ({"seed": 2**64 - 1, "n": 2}, "seed"),
    ({"seed": 2**64}, "seed"),
    ({"seed": -1}, "seed"),
    ({"repetition_penalty": 1e-300}, "repetition_penalty"),
    ({"repetition_penalty": 1e300}, "repetition_penalty"),
])
def test_poisoned_sampling_refused_while_others_run(base, extra, param):
    """A stream runs while the poisoned request arrives: the poison gets its own 400, the stream all its tokens."""
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    with health_answers(base), concurrent.futures.ThreadPoolExecutor(1) as pool:
        stream = pool.submit(lambda: list(client.completions.create(
            model="tiny", prompt="hello world", max_tokens=60, temperature=0.7, seed=1, stream=True,
            extra_body={"ignore_eos": True})))
        time.sleep(0.2)
        status, got = request(base, "/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 8,
                                                         "temperature": 1.0, **extra})
        chunks = stream.result(timeout=120)
    assert_openai_error(status, got, 400, param)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert sum(1 for c in chunks if c.choices[0].text) >= 50  # word-level vocabulary: about one piece per token


def test_largest_seed_with_n_is_served(base):
    status, got = request(base, "/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 2, "n": 2,
                                                     "temperature": 1.0, "seed": 2**64 - 2})
    assert status == 200 and len(got["choices"]) == 2, got


# ------------------------------------------------------------------------------------------------ disconnects
def test_non_streaming_disconnect_cancels_the_requests(base):
    """A JSON (non-streaming) client that hangs up: its 4 requests are aborted, their blocks freed, long before
    4 x 240 tokens would have been generated."""
    before = _health(base)
    host, port = base.removeprefix("http://").split(":")
    body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 240, "n": 4, "temperature": 0,
                       "ignore_eos": True}).encode()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        deadline = time.time() + 30
        while _health(base)["requests_in_flight"] == 0 and time.time() < deadline:
            time.sleep(0.01)  # running now
    now = _wait_idle(base)
    assert now["requests_aborted"] == before["requests_aborted"] + 4, now
    assert now["kv_blocks_free"] == now["kv_blocks_total"], now
    _ok(base)


# ------------------------------------------------------------------------------------------------ process level
def test_sigterm_under_load_exits_promptly(ckpt):
    """SIGTERM while 8 streams run, template bombs render and long prompts arrive: the server exits within its
    shutdown timeout plus a few seconds, without a traceback."""
    proc, base = _start(ckpt, "--shutdown-timeout", "1")
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)

    def stream():
        with contextlib.suppress(Exception):  # cut off by the shutdown: an error event or a closed connection
            for _ in client.completions.create(model="tiny", prompt="hello", max_tokens=240, temperature=0,
                                               stream=True, extra_body={"ignore_eos": True}):
                pass

    def hostile(i):
        with contextlib.suppress(Exception):
            body = _chat("bomb:time") if i % 2 else {"model": "tiny", "prompt": "hello " * 150_000}
            request(base, "/v1/chat/completions" if i % 2 else "/v1/completions", body)

    pool = concurrent.futures.ThreadPoolExecutor(16)
    try:
        futures = [pool.submit(stream) for _ in range(8)] + [pool.submit(hostile, i) for i in range(8)]
        time.sleep(1.0)
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        elapsed = time.perf_counter() - t0
        concurrent.futures.wait(futures, timeout=30)
    finally:
        pool.shutdown(wait=False)
        if proc.poll() is None:
            proc.kill()
    assert code in (0, -signal.SIGTERM) and elapsed < 10, (code, elapsed)
    assert "Traceback" not in proc.stdout.read()


def test_serve_without_tokenizer_json_fails_in_one_line(ckpt, tmp_path):
    d = tmp_path / "no_tokenizer"
    shutil.copytree(ckpt, d)
    (d / "tokenizer.json").unlink()
    r = subprocess.run([sys.executable, "-m", "modelgen.cli", "serve", "--checkpoint", str(d), "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "has no tokenizer.json" in last and str(d) in last, r.stderr
    assert "Traceback" not in r.stderr and "/v1 (" not in r.stderr, r.stderr  # no "NAME on http://...: /v1" banner
