"""Sampler: greedy, temperature, top-k, top-p, seeds; and `--ignore-eos` never changes logits."""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams, filter_logits, sample


def test_greedy_is_argmax():
    logits = torch.tensor([[0.1, 3.0, 2.0], [5.0, -1.0, 4.9]])
    assert sample(logits, [SamplingParams()] * 2, [None, None]) == [1, 0]


def test_top_k_and_top_p_masks():
    logits = torch.tensor([4.0, 3.0, 2.0, 1.0])
    assert torch.isinf(filter_logits(logits, 2, 1.0)).tolist() == [False, False, True, True]
    probs = logits.softmax(-1)  # ~[0.64, 0.24, 0.09, 0.03]
    assert probs[0] < 0.7
    assert torch.isinf(filter_logits(logits, 0, 0.7)).tolist() == [False, False, True, True]
    assert torch.isinf(filter_logits(logits, 0, 0.5)).tolist() == [False, True, True, True]


def test_seeded_sampling_is_reproducible_and_follows_distribution():
    logits = torch.tensor([[1.0, 1.0, 1.0, -10.0]])
    p = SamplingParams(temperature=1.0, seed=7)

    def draw(seed):
        g = torch.Generator().manual_seed(seed)
        return [sample(logits, [p], [g])[0] for _ in range(300)]

    a, b = draw(7), draw(7)
    assert a == b
    assert set(a) == {0, 1, 2}  # the -10 logit is (practically) never drawn
    assert max(a.count(i) for i in range(3)) < 150


def test_invalid_params_rejected():
    with pytest.raises(ValueError):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError):
        SamplingParams(temperature=-1)


def test_eos_stops_and_ignore_eos_continues_with_same_tokens(llama_checkpoint):
    path, _ = llama_checkpoint("gqa")
    llm = LLM(path, target="rocm", dtype="float32", max_model_len=64)
    prompt = [1, 5, 9]
    full = llm.generate([prompt], SamplingParams(max_new_tokens=20, ignore_eos=True))[0]
    llm.eos_ids = {full[3]}  # pretend the 4th generated token is EOS
    stopped = llm.generate([prompt], SamplingParams(max_new_tokens=20))[0]
    assert stopped == full[:4]
    again = llm.generate([prompt], SamplingParams(max_new_tokens=20, ignore_eos=True))[0]
    assert again == full
