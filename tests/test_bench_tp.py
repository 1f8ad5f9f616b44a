"""bench/tp.py at test size on CPU (gloo): TP=2 and TP=1 in one run, dummy weights, the same greedy tokens."""
from __future__ import annotations

import json

import pytest

from bench.tp import main

pytestmark = pytest.mark.slow


def test_bench_tp_smoke(tmp_path, capsys):
    out = tmp_path / "tp.json"
    assert main(["--size", "tiny", "--device", "cpu", "--dtype", "float32", "--batches", "1", "2", "--prompt", "12",
                 "--new", "6", "--reps", "1", "--check-prompts", "2", "--check-new", "6", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == result
    assert set(result["tp1"]["decode_tokens_per_s"]) == set(result["tp2"]["decode_tokens_per_s"]) == {"1", "2"}
    assert all(v > 0 for v in result["tp2"]["decode_tokens_per_s"].values())
    assert result["speedup"]["1"] == pytest.approx(
        result["tp2"]["decode_tokens_per_s"]["1"] / result["tp1"]["decode_tokens_per_s"]["1"], rel=1e-2)
    check = result["check"]
    assert check["tokens_equal"] and check["matching_prefix_per_prompt"] == [6, 6]
    assert check["max_abs_logit_diff"] < 1e-4 * max(1.0, check["logit_scale"])
