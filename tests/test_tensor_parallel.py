"""Tensor parallelism: world size 2 (torch.distributed, gloo, two processes) gives the logits of world size 1."""
from __future__ import annotations

import pytest

from tests.llama_fixtures import make_llama
from tests.parity_helpers import assert_tp2_matches_tp1_on

pytestmark = pytest.mark.slow
PROMPT = [1, 17, 42, 99, 3, 150, 64, 8]

CASES = {
    "gqa": ("gqa", {}),  # 2 KV heads -> 1 per rank
    "mqa_replicated_kv": ("mqa", {}),  # 1 KV head replicated on both ranks
    "tied_odd_vocab_bias": ("bias", {"tie_word_embeddings": True, "vocab_size": 161}),  # padded vocab shard
}


@pytest.mark.parametrize("case", list(CASES))
def test_world_size_2_matches_world_size_1(tmp_path, case):
    """Logits and 8 greedy tokens equal TP=1's on rocm and neuron (one spawn for both); every case holds one KV head
    per rank (split, or replicated for MQA)."""
    name, overrides = CASES[case]
    make_llama(tmp_path / "ckpt", name, **overrides)
    assert_tp2_matches_tp1_on(tmp_path / "ckpt", ["rocm", "neuron"], PROMPT, tmp_path, max_model_len=64, kv_heads=1)
