"""Tensor parallelism: world size 2 (torch.distributed, gloo, two processes) gives the logits of world size 1."""
from __future__ import annotations

import json

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from tests.llama_fixtures import make_llama
from tests.tp_worker import run_rank

pytestmark = pytest.mark.slow
PROMPT = [1, 17, 42, 99, 3, 150, 64, 8]

CASES = {
    "gqa": ("gqa", {}),  # 2 KV heads -> 1 per rank
    "mqa_replicated_kv": ("mqa", {}),  # 1 KV head replicated on both ranks
    "tied_odd_vocab_bias": ("bias", {"tie_word_embeddings": True, "vocab_size": 161}),  # padded vocab shard
}


@pytest.mark.parametrize("target", ["rocm", "neuron"])
@pytest.mark.parametrize("case", list(CASES))
def test_world_size_2_matches_world_size_1(tmp_path, case, target):
    name, overrides = CASES[case]
    make_llama(tmp_path / "ckpt", name, **overrides)
    single = LLM(tmp_path / "ckpt", target=target, dtype="float32", max_model_len=64)
    want = single.score(PROMPT)
    want_tokens = single.generate([PROMPT], SamplingParams(max_new_tokens=8, ignore_eos=True))[0]
    out = str(tmp_path / "result")
    mp.spawn(run_rank, args=(2, str(tmp_path / "init"), str(tmp_path / "ckpt"), target, PROMPT, out), nprocs=2)
    for rank in range(2):
        got = load_file(f"{out}.rank{rank}.safetensors")["logits"]
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        meta = json.loads(open(f"{out}.rank{rank}.json").read())
        assert meta["tokens"] == want_tokens
        assert meta["kv_heads"] == 1  # every case holds one KV head per rank (split, or replicated for MQA)
