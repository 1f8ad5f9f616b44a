"""Neuron on-device sampling: the generated forward returns (token ids, logits) when given sampling_params."""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.ops.sampling import sample_static

PROMPTS = [[1, 5, 9, 33], [1, 7, 7, 7, 12], [1, 99]]


def test_static_sampler_masks_and_greedy_rows():
    torch.manual_seed(0)
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0]] * 4)
    params = torch.tensor([[0, 1.0, 0.0], [1, 1.0, 1.0], [2, 1.0, 5.0], [0, 0.5, 1.0]])
    draws = torch.stack([sample_static(logits, params) for _ in range(400)])
    assert (draws[:, 0] == 0).all()  # temperature 0: greedy
    assert (draws[:, 1] == 0).all()  # top-k 1
    assert set(draws[:, 2].tolist()) == {0, 1}  # top-k 2 at a high temperature: both, never the others
    assert (draws[:, 3] == 0).all()  # top-p 0.5: only the 64% token survives


def test_sampled_distribution_follows_softmax():
    torch.manual_seed(1)
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]])).expand(4000, 3)
    ids = sample_static(logits, torch.tensor([[0, 1.0, 1.0]]).expand(4000, 3))
    freq = torch.bincount(ids, minlength=3).float() / 4000
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.2]), atol=0.03)


@pytest.mark.parametrize("compile", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_on_device_greedy_equals_host_greedy_and_traces(llama_checkpoint, compile):
    torch._dynamo.reset()
    path, _ = llama_checkpoint("gqa")
    kwargs = dict(target="neuron", dtype="float32", max_model_len=64, block_size=8, max_num_seqs=4,
                  prefill_buckets=[16, 64], decode_buckets=[4], decode_context_buckets=[64])
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    host = LLM(path, **kwargs).generate(PROMPTS, params)
    ods = LLM(path, on_device_sampling=True, compile=compile, **kwargs)
    if compile:
        ods.runner.warmup()
        torch.compiler.set_stance("fail_on_recompile")
    try:
        assert ods.generate(PROMPTS, params) == host
        sampled = ods.generate(PROMPTS, SamplingParams(max_new_tokens=8, temperature=0.8, top_k=20, top_p=0.9,
                                                       seed=3, ignore_eos=True))
        again = ods.generate(PROMPTS, SamplingParams(max_new_tokens=8, temperature=0.8, top_k=20, top_p=0.9,
                                                     seed=3, ignore_eos=True))
    finally:
        torch.compiler.set_stance("default")
    assert sampled == again and all(len(s) == 8 for s in sampled)
