"""``modelgen serve`` in a subprocess on a free port, driven with the official ``openai`` client: completions and
chat (JSON and SSE streaming) equal the engine's greedy outputs, ``n``/``stop``/``max_tokens``, concurrent streaming
clients each get what they get alone, malformed JSON and out-of-range parameters get OpenAI-style 400 bodies and the
server keeps serving, a client that disconnects mid-stream has its KV blocks freed."""
from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("fastapi", reason="the `serve` extra")
pytest.importorskip("uvicorn", reason="the `serve` extra")
openai = pytest.importorskip("openai", reason="the `test` extra")

from modelgen import LLM, SamplingParams  # noqa: E402
from tests.test_python_api import make_api_checkpoint  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ckpt(llama_checkpoint, tmp_path_factory):
    return make_api_checkpoint(llama_checkpoint, tmp_path_factory)


def _start(ckpt, *extra: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    # Output to a file, not a pipe: nobody reads a pipe while a test runs, and once its buffer is full of access-log
    # lines the server would block writing the next one. proc.stdout reads the file (from its start).
    log = tempfile.NamedTemporaryFile("w+", prefix="modelgen-serve-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "modelgen.cli", "serve", "--checkpoint", str(ckpt),
                             "--port", str(port), "--max-num-seqs", "8", "--model-name", "tiny", *extra],
                            stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
    log.close()
    proc.stdout = open(log.name)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(base + "/health", timeout=2)
            return proc, base
        except (urllib.error.URLError, ConnectionError, TimeoutError):  # the port is bound before the model loads
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.fail(f"server did not start:\n{proc.stdout.read()}")
            time.sleep(0.3)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if the server has not exited within 30 s."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def server(ckpt):
    proc, base = _start(ckpt)
    yield base
    _stop(proc)


@pytest.fixture(scope="module")
def llm(ckpt):
    return LLM(ckpt, max_num_seqs=8, progress=False)


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0)


def test_models_and_health(client, server):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    health = json.load(urllib.request.urlopen(server + "/health"))
    assert health["status"] == "ok" and health["kv_blocks_total"] > 0


def test_completion_equals_engine(client, llm):
    r = client.completions.create(model="tiny", prompt="hello world w9", max_tokens=6, temperature=0)
    out = llm.complete("hello world w9", SamplingParams(max_new_tokens=6))[0]
    assert r.choices[0].text == out.text and r.choices[0].finish_reason == out.finish_reason
    assert r.usage.prompt_tokens == len(out.prompt_token_ids) and r.usage.completion_tokens == len(out.token_ids)


def test_chat_and_streaming_equal_engine(client, llm):
    messages = [{"role": "user", "content": "hello world"}]
    want = llm.chat(messages, SamplingParams(max_new_tokens=6))
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=6, temperature=0)
    assert r.choices[0].message.content == want.text
    stream = client.chat.completions.create(model="tiny", messages=messages, max_tokens=6, temperature=0,
                                            stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream)
    assert text == want.text
    stream = client.completions.create(model="tiny", prompt="hello world w9", max_tokens=6, temperature=0,
                                       stream=True)
    pieces = [c.choices[0].text for c in stream]
    assert "".join(pieces) == llm.complete("hello world w9", SamplingParams(max_new_tokens=6))[0].text
    assert len([p for p in pieces if p]) > 1  # token by token, not one piece


def test_greedy_equals_modelgen_run(client, ckpt):
    """The same chat prompt through `modelgen run` (chat template by default) and the server."""
    import contextlib
    import io

    from modelgen.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["run", "--checkpoint", str(ckpt), "--prompt", "hello world", "--max-new-tokens", "7",
                     "--json"]) == 0
    want = json.loads(out.getvalue())["outputs"][0]["text"]
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello world"}],
                                       max_tokens=7, temperature=0)
    assert r.choices[0].message.content == want


def test_n_and_stop(client, llm):
    r = client.completions.create(model="tiny", prompt="hello", max_tokens=5, temperature=1.0, n=3, seed=7)
    assert len(r.choices) == 3 and sorted(c.index for c in r.choices) == [0, 1, 2]
    full = llm.complete("hello world", SamplingParams(max_new_tokens=8))[0].text
    words = full.split()
    stop = words[2]
    r = client.completions.create(model="tiny", prompt="hello world", max_tokens=8, temperature=0, stop=[stop])
    assert r.choices[0].text == full[: full.find(stop)] and r.choices[0].finish_reason == "stop"


def test_concurrent_streams_equal_alone(client, llm):
    prompts = [f"hello w{10 + i} world w{40 + 3 * i}" for i in range(32)]  # 32 clients, 8 decoded at once
    alone = [llm.complete(p, SamplingParams(max_new_tokens=8, ignore_eos=True))[0].token_ids for p in prompts]
    alone_text = [llm.tokenizer.decode(ids) for ids in alone]

    def one(p):
        s = client.completions.create(model="tiny", prompt=p, max_tokens=8, temperature=0, stream=True,
                                      extra_body={"ignore_eos": True})
        return "".join(c.choices[0].text for c in s)

    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(one, prompts))
    assert got == alone_text


def _post(server, path, data: bytes):
    req = urllib.request.Request(server + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


@pytest.mark.parametrize("body, param", [
    (b"{not json", None),
    (json.dumps({"model": "tiny", "prompt": "hello", "temperature": -1}).encode(), "temperature"),
    (json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 0}).encode(), "max_tokens"),
    (json.dumps({"model": "tiny", "prompt": "hello", "n": 99}).encode(), "n"),
    (json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 10 ** 6}).encode(), "prompt"),
    (json.dumps({"model": "tiny", "prompt": 5}).encode(), "prompt"),
])
def test_bad_requests_get_400_and_server_keeps_serving(server, client, body, param):
    status, err = _post(server, "/v1/completions", body)
    assert status == 400, err
    assert err["error"]["type"] == "invalid_request_error" and err["error"]["message"]
    assert err["error"]["param"] == param
    assert client.completions.create(model="tiny", prompt="hello", max_tokens=2, temperature=0).choices


def _health(server) -> dict:
    return json.load(urllib.request.urlopen(server + "/health"))


def _wait_idle(server, timeout: float = 30) -> dict:
    """/health once no request is in flight (or after ``timeout`` seconds)."""
    deadline = time.time() + timeout
    while True:
        now = _health(server)
        if now["requests_in_flight"] == 0 or time.time() > deadline:
            return now
        time.sleep(0.05)


def test_disconnect_mid_stream_frees_blocks(server, client):
    import http.client

    before = _health(server)
    host, port = server.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port))
    conn.request("POST", "/v1/completions", json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 240,
                                                        "temperature": 0, "stream": True, "ignore_eos": True}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    resp.fp.readline()  # the first event arrived: the request is running
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    now = _wait_idle(server)
    # Cancelled, not run to its 240 tokens; every block is back; the server keeps serving.
    assert now["requests_aborted"] == before["requests_aborted"] + 1, now
    assert now["requests_in_flight"] == 0 and now["kv_blocks_free"] == now["kv_blocks_total"], now
    assert client.completions.create(model="tiny", prompt="hello", max_tokens=2, temperature=0).choices


def test_queue_full_gets_503(server, client):
    """20 prompts x n=16 = 320 requests at once, over the 8 running + 256 waiting the server accepts."""
    status, err = _post(server, "/v1/completions", json.dumps({"model": "tiny", "prompt": ["hello"] * 20, "n": 16,
                                                                "max_tokens": 2}).encode())
    assert status == 503 and "requests in flight" in err["error"]["message"], err
    assert _health(server)["requests_in_flight"] == 0  # nothing of the refused call was queued
    assert client.completions.create(model="tiny", prompt="hello", max_tokens=2, temperature=0).choices


def test_sigterm_finishes_running_streams(ckpt):
    """Graceful shutdown: a stream running when SIGTERM arrives is completed, then the server exits cleanly."""
    proc, base = _start(ckpt)
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        stream = client.completions.create(model="tiny", prompt="hello", max_tokens=240, temperature=0, stream=True,
                                           extra_body={"ignore_eos": True})
        chunks = iter(stream)
        first = next(chunks)
        proc.terminate()
        rest = list(chunks)
        finish = [c.choices[0].finish_reason for c in [first, *rest] if c.choices[0].finish_reason]
        assert finish == ["length"]
        # uvicorn re-raises the captured SIGTERM once it has shut down cleanly (exit status -SIGTERM), 0 otherwise
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
        assert "Traceback" not in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()


# ---------------------------------------------------------------------------------------- speculative decoding (MTP)
@pytest.fixture(scope="module")
def mtp_ckpt(ckpt, tmp_path_factory):
    """The tiny DeepSeek-V3 checkpoint with a random MTP head, and the word-level tokenizer of ``ckpt`` (160 ids)."""
    import shutil

    from tests.mtp_fixtures import make_deepseek_mtp

    d = tmp_path_factory.mktemp("mtp_api")
    make_deepseek_mtp(d)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ckpt / name, d / name)
    return d


def test_engine_loop_posts_every_accepted_token(mtp_ckpt, monkeypatch):
    """A speculative step emits several tokens; the engine loop must post all of them (it posted only the last).
    An oracle draft (the true greedy continuation) makes every step accept K drafts."""
    import asyncio

    from modelgen.runtime.engine.speculative import SpeculativeDecoder
    from modelgen.runtime.server.engine_loop import EngineLoop

    prompt, params = [5, 6, 7, 8, 9], SamplingParams(max_new_tokens=12, ignore_eos=True)
    ref = LLM(mtp_ckpt, max_num_seqs=4, progress=False).generate([prompt], params)[0]
    spec = LLM(mtp_ckpt, max_num_seqs=4, progress=False, speculative_tokens=3)
    original = SpeculativeDecoder._draft

    def oracle(self, batch, *args):
        original(self, batch, *args)
        for r in batch:
            if r.seq_id in self.drafted:
                n = len(r.output)
                self.drafted[r.seq_id].tokens = ref[n : n + len(self.drafted[r.seq_id].tokens)]

    monkeypatch.setattr(SpeculativeDecoder, "_draft", oracle)

    async def collect():
        loop = EngineLoop(spec)
        try:
            (handle,) = loop.submit([prompt], [params])
            chunks = []
            while True:
                ids, finish = await asyncio.wait_for(handle.events.get(), timeout=120)
                chunks.append(ids)
                if finish is not None:
                    return chunks
        finally:
            loop.shutdown()

    chunks = asyncio.run(collect())
    assert [t for c in chunks for t in c] == ref
    assert max(map(len, chunks)) > 1 and len(chunks) < len(ref)  # several tokens per step did happen


def test_serve_speculative_streams_plain_greedy_text(mtp_ckpt):
    """`modelgen serve --speculative-tokens 2`: streamed and non-streamed greedy text equal the engine's without
    speculation."""
    plain = LLM(mtp_ckpt, max_num_seqs=4, progress=False)
    prompts = ["hello world w9", "w12 w40 hello"]
    want = [plain.complete(p, SamplingParams(max_new_tokens=10, ignore_eos=True))[0].text for p in prompts]
    proc, base = _start(mtp_ckpt, "--speculative-tokens", "2")
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        for p, w in zip(prompts, want):
            s = client.completions.create(model="tiny", prompt=p, max_tokens=10, temperature=0, stream=True,
                                          extra_body={"ignore_eos": True})
            assert "".join(c.choices[0].text for c in s) == w
            r = client.completions.create(model="tiny", prompt=p, max_tokens=10, temperature=0,
                                          extra_body={"ignore_eos": True})
            assert r.choices[0].text == w
    finally:
        _stop(proc)
