"""bench/serve.py: the local Llama-3-layout tokenizer of --shape, and a tiny end-to-end run (engine + `modelgen serve
--load-dummy` + openai clients) whose JSON has every figure the H200 run reports."""
from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_serve", ROOT / "bench" / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("vocab, n_special", [(128256, 256), (2048, 256)])
def test_tokenizer_covers_the_model_vocabulary(vocab, n_special):
    bench = _bench()
    tok = bench.build_tokenizer(vocab, n_special)
    assert tok.get_vocab_size() == vocab
    base = vocab - n_special
    # Llama 3's special ids (128000 = <|begin_of_text|>, 128009 = <|eot_id|>) at the same offsets
    assert tok.token_to_id("<|begin_of_text|>") == base and tok.token_to_id("<|eot_id|>") == base + 9
    assert tok.token_to_id("<|start_header_id|>") == base + 6 and tok.token_to_id("<|end_header_id|>") == base + 7
    # every regular id past the 256 bytes decodes on its own to 2-3 printable ASCII characters (what a random model
    # samples must reach the client as text), and text round-trips
    rng = random.Random(0)
    for i in rng.sample(range(256, base), 300):
        text = tok.decode([i])
        assert 2 <= len(text) <= 3 and text.isascii() and text.isprintable(), (i, text)
    for q in bench.QUESTIONS:
        ids = tok.encode(q).ids
        assert tok.decode(ids) == q
        assert len(ids) < len(q)  # merges happen: not one token per character
    assert tok.decode([base + 9]) == ""  # specials are skipped, as the server decodes


def test_shape_checkpoint_files(tmp_path):
    bench = _bench()
    d = bench.write_shape_checkpoint("llama3-8b", tmp_path / "c")
    cfg = json.loads((d / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["intermediate_size"], cfg["vocab_size"]) == (4096, 32, 32, 8, 14336, 128256)
    from modelgen.runtime.tokenizer import Tokenizer

    tok = Tokenizer.from_checkpoint(d)
    ids = tok.encode_chat("Who wrote Hamlet?")
    # <|begin_of_text|>, two headers (user, assistant), one <|eot_id|>, the text in between unchanged
    assert ids[0] == 128000 and ids.count(128006) == ids.count(128007) == 2 and ids.count(128009) == 1
    assert tok.decode(ids, skip_special_tokens=False) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWho wrote Hamlet?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert json.loads((d / "generation_config.json").read_text())["eos_token_id"] == [128001, 128009]


@pytest.mark.slow
def test_tiny_end_to_end(tmp_path):
    pytest.importorskip("fastapi", reason="the `serve` extra")
    pytest.importorskip("openai", reason="the `test` extra")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "serve.py"), "--shape", "tiny", "--clients", "1", "3",
                           "--max-tokens", "6", "--budget-s", "120", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=150,
                          env={"OMP_NUM_THREADS": "1", **os.environ})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = json.loads(out.read_text())
    assert not r["cut_by_budget"] and not r["skipped"]
    for n in ("1", "3"):
        eng, srv = r["engine"][n], r["server"][n]
        assert eng["generated_tokens"] == int(n) * 6
        assert srv["requests_with_text"] == int(n)
        assert 0 < srv["ttft_p50_s"] <= srv["ttft_p95_s"] <= srv["ttft_max_s"]
        assert srv["per_request_decode_tokens_per_s_p50"] > 0
        assert r["ratio_server_over_engine"][n] == pytest.approx(srv["tokens_per_s"] / eng["tokens_per_s"])
        # float32 tiny model, same dummy weights in both processes: the server streams the engine's greedy text
        assert srv["texts_equal_engine"] == int(n)
    assert "x LLM.generate" in proc.stdout
