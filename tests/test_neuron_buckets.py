"""Neuron compile contract, the rest of it: the warm-up bucket table (``modelgen run --target neuron --compile``),
bucket padding with the config's ``pad_token_id``, and ``cached_seq_len`` agreeing with the positions the generated
attention reads."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.work import Work
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.targets.neuron.runner import format_bucket_table
from tests.llama_fixtures import make_llama

PROMPT = [1, 17, 42, 99, 3, 150, 64, 8]


def test_padding_uses_the_config_pad_token_id(tmp_path):
    make_llama(tmp_path, "gqa", pad_token_id=7)
    llm = LLM(tmp_path, target="neuron", dtype="float32", max_model_len=64, max_num_seqs=4,
              prefill_buckets=[16, 64], decode_buckets=[4])
    assert llm.runner.pad_token_id == 7
    llm.blocks.ensure(0, len(PROMPT))
    kwargs, n = llm.runner.build_inputs([Work(0, PROMPT, 0)])
    ids = kwargs["input_ids"].tolist()
    assert ids == PROMPT + [7] * (16 - len(PROMPT))
    kwargs, _ = llm.runner.build_inputs([Work(0, [5], len(PROMPT))])  # decode: 1 request padded to 4 rows
    assert kwargs["input_ids"].tolist() == [5, 7, 7, 7]
    # the pad id changes nothing real: same tokens as a model padding with 0
    make_llama(tmp_path / "zero", "gqa")
    zero = LLM(tmp_path / "zero", target="neuron", dtype="float32", max_model_len=64, max_num_seqs=4,
               prefill_buckets=[16, 64], decode_buckets=[4])
    assert zero.runner.pad_token_id == 0
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    assert llm.generate([PROMPT], params) == zero.generate([PROMPT], params)


def test_cached_seq_len_is_each_chunks_first_position(tmp_path):
    make_llama(tmp_path, "gqa")
    llm = LLM(tmp_path, target="neuron", dtype="float32", max_model_len=64, max_num_seqs=2, block_size=8,
              prefill_buckets=[8, 16], max_num_batched_tokens=16)
    assert llm.runner.segmented_prefill
    llm.blocks.ensure(0, 24)
    llm.blocks.ensure(1, 24)
    kwargs, _ = llm.runner.build_inputs([Work(0, list(range(3, 11)), 8), Work(1, list(range(3, 7)), 20)])
    meta = next(iter(kwargs["attn_metadata"].values()))
    assert meta["kv_segment_size"] > 0
    cached = meta["cached_seq_len"][:, 0].tolist()
    assert cached == [8, 20]
    pos, seq = kwargs["positions"].tolist(), meta["seq_ids"].tolist()
    assert [min(p for p, s in zip(pos, seq) if s == r) for r in (0, 1)] == cached


def test_bucket_table_format():
    rows = [{"path": "prefill", "bucket": "16 tokens", "seconds": 1.5, "graphs": 1},
            {"path": "decode", "bucket": "1 seqs x 64 context", "seconds": 0.25, "graphs": 1}]
    text = format_bucket_table(rows)
    assert text.splitlines()[0].split() == ["path", "bucket", "compile", "s", "graphs"]
    assert "16 tokens" in text and text.splitlines()[-1].split() == ["total", "2", "buckets", "1.75", "2"]


@pytest.mark.slow
def test_warmup_reports_every_bucket_then_never_recompiles(tmp_path):
    torch._dynamo.reset()
    make_llama(tmp_path, "gqa")
    llm = LLM(tmp_path, target="neuron", dtype="float32", max_model_len=64, max_num_seqs=2, compile=True,
              prefill_buckets=[64], decode_buckets=[1, 2], decode_context_buckets=[64])
    llm.warmup()
    table = llm.runner.bucket_table
    assert [(r["path"], r["bucket"]) for r in table] == [
        ("prefill", "64 tokens"), ("decode", "1 seqs x 64 context"), ("decode", "2 seqs x 64 context")]
    assert all(r["graphs"] >= 1 and r["seconds"] > 0 for r in table)
    eager = LLM(tmp_path, target="neuron", dtype="float32", max_model_len=64, max_num_seqs=2,
                prefill_buckets=[64], decode_buckets=[1, 2], decode_context_buckets=[64])
    params = SamplingParams(max_new_tokens=5, ignore_eos=True)
    assert llm.generate([PROMPT, PROMPT[:3]], params) == eager.generate([PROMPT, PROMPT[:3]], params)


@pytest.mark.slow
def test_cli_compile_prints_the_bucket_table(tmp_path):
    make_llama(tmp_path, "gqa")
    proc = subprocess.run(
        [sys.executable, "-m", "modelgen.cli", "run", "--checkpoint", str(tmp_path), "--target", "neuron",
         "--compile", "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", "4", "--ignore-eos",
         "--dtype", "float32", "--max-model-len", "32", "--json"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["outputs"][0]["token_ids"]) == 4
    table = proc.stderr[proc.stderr.index("path "):].splitlines()
    assert table[0].split()[:2] == ["path", "bucket"]
    assert any(line.startswith("prefill") for line in table) and any(line.startswith("decode") for line in table)
    assert any(line.startswith("total") for line in table)
