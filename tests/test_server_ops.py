"""`modelgen serve` operability: the port is bound before the model loads (a taken port fails at once, in one line);
SIGTERM aborts what is still running after --shutdown-timeout with an error event for each stream, and the process
exits without a traceback; the default KV cache is sized to the model (at most the weights' bytes) and printed;
--kv-cache-memory takes bytes or a fraction; /metrics is Prometheus text; one access-log line per request; --api-key
(Bearer) guards /v1; --tensor-parallel-size reaches the engine."""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

pytest.importorskip("fastapi", reason="the `serve` extra")
pytest.importorskip("uvicorn", reason="the `serve` extra")
pytest.importorskip("prometheus_client", reason="the `serve` extra")
openai = pytest.importorskip("openai", reason="the `test` extra")

from modelgen import LLM, SamplingParams  # noqa: E402
from modelgen.runtime.server import app as server_app  # noqa: E402
from tests.test_server import _start  # noqa: E402
from tests.test_server_fields import assert_openai_error, request, running  # noqa: E402
from tests.test_python_api import make_api_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def ckpt(llama_checkpoint, tmp_path_factory):
    return make_api_checkpoint(llama_checkpoint, tmp_path_factory)


@pytest.fixture(scope="module")
def llm(ckpt):
    return LLM(ckpt, max_num_seqs=4, progress=False)


def test_taken_port_fails_before_loading(tmp_path):
    """The port is checked first: with a taken port and a checkpoint that does not even exist, the error is the
    port's (nothing was loaded), one line, no traceback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "modelgen.cli", "serve", "--checkpoint",
                            str(tmp_path / "nope"), "--port", str(port)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "choose another --port" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "loading the model" not in r.stderr and "nope" not in r.stderr


def test_sigterm_aborts_running_streams_with_error_event(ckpt):
    """--shutdown-timeout 0, one sequence decoded at a time: a stream of n=3 choices x 250 tokens (run one after the
    other) gets SIGTERM after its first token; it ends with an error event (the openai client raises APIError)
    instead of its remaining ~750 tokens, and the server exits cleanly, without a traceback."""
    proc, base = _start(ckpt, "--shutdown-timeout", "0", "--max-num-seqs", "1")
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        stream = client.completions.create(model="tiny", prompt="hello w10", max_tokens=250, n=3, temperature=0,
                                           stream=True, extra_body={"ignore_eos": True})
        chunks = iter(stream)
        next(chunks)
        proc.send_signal(signal.SIGTERM)
        got = []
        with pytest.raises(openai.APIError, match="shutting down"):
            for c in chunks:
                got.append(c)
        assert len(got) < 3 * 250 - 1  # aborted, not run to the end
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
        out = proc.stdout.read()
        assert "Traceback" not in out and "CancelledError" not in out, out
        assert "KV cache" in out and "full-length requests" in out, out  # printed at start
    finally:
        if proc.poll() is None:
            proc.kill()


def test_default_kv_cache_is_capped_by_the_weights(ckpt, tmp_path):
    opts, how = server_app.kv_cache_options(None, "cpu", ckpt)
    weights = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
    assert opts == {"kv_cache_memory_cap": max(weights, 64 << 20)} and "at most" in how
    # The cap: 32 requests x 256 tokens would be 512 blocks; a cap of one byte still leaves one full request.
    full = LLM(ckpt, max_num_seqs=32, progress=False)
    assert full.blocks.num_blocks == 32 * 256 // 16
    one = LLM(ckpt, max_num_seqs=32, progress=False, kv_cache_memory_cap=1)
    assert one.blocks.num_blocks == 256 // 16
    summary = server_app.kv_cache_summary(one)
    assert "16 blocks x 16 tokens = 256 tokens" in summary and "1.0 full-length requests" in summary
    assert server_app.kv_cache_options("4GiB", "cpu", ckpt)[0] == {"kv_cache_memory": 4 << 30}
    assert server_app.kv_cache_options("3e9", "cpu", ckpt)[0] == {"kv_cache_memory": 3 * 10**9}
    assert server_app.kv_cache_options("0.5", "cuda", ckpt)[0] == {"gpu_memory_utilization": 0.5}
    assert 0 < server_app.kv_cache_options("0.01", "cpu", ckpt)[0]["kv_cache_memory"]
    for bad in ("lots", "-1", "5 parsecs"):
        with pytest.raises(ValueError, match="--kv-cache-memory"):
            server_app.parse_kv_cache_memory(bad)


def test_metrics_access_log_and_api_key(llm, caplog):
    app = server_app.create_app(llm, "tiny", api_key="s3cret")
    with running(app) as base, caplog.at_level(logging.INFO, logger="modelgen.access"):
        body = {"model": "tiny", "prompt": "hello world", "max_tokens": 4, "temperature": 0,
                "ignore_eos": True}
        assert_openai_error(*request(base, "/v1/completions", body), 401)
        assert_openai_error(*request(base, "/v1/completions", body, headers={"Authorization": "Bearer wrong"}), 401)
        status, got = request(base, "/v1/completions", body, headers={"Authorization": "Bearer s3cret"})
        assert status == 200 and got["usage"]["completion_tokens"] == 4
        client = openai.OpenAI(base_url=base + "/v1", api_key="s3cret", max_retries=0)
        assert "".join(c.choices[0].text for c in client.completions.create(
            model="tiny", prompt="hello", max_tokens=3, temperature=0, stream=True, extra_body={"ignore_eos": True}))
        assert request(base, "/health")[0] == 200  # not behind the key
        with urllib.request.urlopen(base + "/metrics") as r:
            assert r.headers["Content-Type"].startswith("text/plain")
            text = r.read().decode()
    from prometheus_client.parser import text_string_to_metric_families

    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples[("modelgen_requests_total", (("route", "/v1/completions"), ("status", "401")))] == 2
    assert samples[("modelgen_requests_total", (("route", "/v1/completions"), ("status", "200")))] == 2
    assert samples[("modelgen_generation_tokens_total", ())] == 7
    assert samples[("modelgen_prompt_tokens_total", ())] > 0
    assert samples[("modelgen_time_to_first_token_seconds_count", ())] == 2
    assert samples[("modelgen_e2e_request_latency_seconds_count", ())] == 2
    assert samples[("modelgen_kv_cache_usage_ratio", ())] == 0  # all blocks back
    assert samples[("modelgen_kv_cache_blocks", ())] == llm.blocks.num_blocks
    lines = [r.getMessage() for r in caplog.records if r.name == "modelgen.access"]
    assert len([x for x in lines if '"POST /v1/completions HTTP/1.1" 401' in x]) == 2, lines
    assert len([x for x in lines if '"POST /v1/completions HTTP/1.1" 200' in x]) == 2, lines
    assert any('"GET /health HTTP/1.1" 200' in x for x in lines), lines


def test_serve_tensor_parallel_2_equals_single(ckpt, llm):
    """--tensor-parallel-size 2 (gloo ranks on CPU) serves the same greedy text as one process."""
    want = llm.complete("hello world w9", SamplingParams(max_new_tokens=6, ignore_eos=True))[0].text
    proc, base = _start(ckpt, "--tensor-parallel-size", "2")
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        r = client.completions.create(model="tiny", prompt="hello world w9", max_tokens=6, temperature=0,
                                      extra_body={"ignore_eos": True})
        assert r.choices[0].text == want
    finally:
        proc.terminate()
        try:
            assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert "Traceback" not in proc.stdout.read()


def test_api_key_from_environment(ckpt, monkeypatch):
    """MODELGEN_API_KEY (kept out of the process list) works as --api-key."""
    key = "k-" + os.urandom(4).hex()
    monkeypatch.setenv("MODELGEN_API_KEY", key)
    proc, base = _start(ckpt)  # the child inherits the environment
    try:
        body = {"model": "tiny", "prompt": "hello", "max_tokens": 2}
        assert_openai_error(*request(base, "/v1/completions", body), 401)
        assert request(base, "/v1/completions", body, headers={"Authorization": f"Bearer {key}"})[0] == 200
        assert json.loads(urllib.request.urlopen(base + "/health").read())["status"] == "ok"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
