"""Neuron rules: every prefill and decode bucket traces with torch.compile(fullgraph=True) (a graph break raises),
and after warm-up, serving requests never recompiles (torch.compiler.set_stance("fail_on_recompile"))."""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams

pytestmark = pytest.mark.slow


def test_buckets_trace_fullgraph_and_never_recompile(llama_checkpoint):
    torch._dynamo.reset()
    path, hf = llama_checkpoint("gqa")
    buckets = dict(prefill_buckets=[16, 64], decode_buckets=[1, 2, 4], decode_context_buckets=[16, 64])
    llm = LLM(path, target="neuron", dtype="float32", max_model_len=64, block_size=8, max_num_seqs=4, compile=True,
              **buckets)
    llm.runner.warmup()  # fullgraph=True: any graph break in any bucket raises here
    prompts = [[1, 5, 9, 33], [1, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 12], [1, 99]]
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    eager = LLM(path, target="neuron", dtype="float32", max_model_len=64, block_size=8, max_num_seqs=4, **buckets)
    expected = eager.generate(prompts, params)
    torch.compiler.set_stance("fail_on_recompile")
    try:
        # batches of 3 -> bucket 4, then 1-2 -> buckets 1/2; contexts under 16 and up to 25 -> context buckets 16/64
        got = llm.generate(prompts, params)
        got_single = llm.generate([prompts[1]], params)
    finally:
        torch.compiler.set_stance("default")
    assert got == expected
    assert got_single == [expected[1]]


def test_recompile_guard_is_live(llama_checkpoint):
    """The stance really rejects a shape outside the warmed buckets (so the test above can fail)."""
    torch._dynamo.reset()
    path, _ = llama_checkpoint("gqa")
    llm = LLM(path, target="neuron", dtype="float32", max_model_len=64, block_size=8, max_num_seqs=4,
              prefill_buckets=[16], decode_buckets=[1], compile=True)
    llm.runner.warmup()
    llm.runner.decode_buckets = [2]  # a bucket that was never traced
    torch.compiler.set_stance("fail_on_recompile")
    try:
        with pytest.raises(Exception, match="(?i)recompil"):
            llm.generate([[1, 2, 3]], SamplingParams(max_new_tokens=3, ignore_eos=True))
    finally:
        torch.compiler.set_stance("default")


def test_runner_refuses_recompiles_after_its_own_warmup(llama_checkpoint):
    """The runner sets the stance itself after warm-up (the Neuron guide's compile contract), scoped to its calls."""
    torch._dynamo.reset()
    path, _ = llama_checkpoint("gqa")
    llm = LLM(path, target="neuron", dtype="float32", max_model_len=64, block_size=8, max_num_seqs=2,
              prefill_buckets=[16], decode_buckets=[2], compile=True)
    llm.warmup()
    assert llm.runner.warm
    params = SamplingParams(max_new_tokens=3, ignore_eos=True)
    assert len(llm.generate([[1, 2, 3]], params)[0]) == 3  # warmed buckets: no recompile needed
    llm.runner.decode_buckets = [1]  # a bucket that was never traced
    with pytest.raises(Exception, match="(?i)recompil"):
        llm.generate([[1, 2, 3]], params)
    # outside the runner's calls the global stance is untouched: other code still compiles new graphs
    assert torch.equal(torch.compile(lambda x: x * 3 + 1)(torch.ones(2)), torch.full((2,), 4.0))
