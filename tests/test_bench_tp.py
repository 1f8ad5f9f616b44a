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


def test_reference_check_judges_a_parting(tmp_path):
    """The three-way check on a made-up parting: TP=2's tokens differ from TP=1's at position 3 of prompt 0. The
    reference (the same dtype and weights as "TP=1") follows TP=1, so its margin favours TP=1's token and, with zero
    noise, the parting is no near-tie."""
    import argparse

    import torch

    from bench.tp import SIZES, reference_check
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams

    (tmp_path / "config.json").write_text(json.dumps(SIZES["tiny"]))
    args = argparse.Namespace(reference_dtype="float32", dtype="float32", device="cpu", prompt=12, new=6, check_new=6)
    g = torch.Generator().manual_seed(1)
    check = torch.randint(3, SIZES["tiny"]["vocab_size"], (2, 12), generator=g).tolist()
    llm = LLM(tmp_path, target="rocm", dtype="float32", device="cpu", load_format="dummy", max_num_seqs=2,
              max_model_len=32, progress=False)
    try:
        tokens = llm.generate(check, SamplingParams(max_new_tokens=6, ignore_eos=True))
        logits = llm.score(check[0]).float()
    finally:
        llm.close()
    other = [list(t) for t in tokens]
    other[0][3] = (other[0][3] + 1) % SIZES["tiny"]["vocab_size"]
    out = reference_check(tmp_path, args, check, {"tokens": tokens, "logits": logits}, {"tokens": other})
    assert out["noise_max_abs_logit_diff"] < 1e-4
    first, second = out["prompts"]
    assert first["tp1_matches_reference"] == 6 and first["tp2_matches_reference"] == 3
    assert first["first_difference"] == 3 and first["reference_token"] == first["tp1_token"] == tokens[0][3]
    assert first["reference_margin_tp1_minus_tp2"] > 0 and first["near_tie"] is False
    assert "first_difference" not in second and second["tp2_matches_reference"] == 6
    assert out["parted"] == 1 and out["all_partings_near_ties"] is False
