"""Pipeline parallelism's layer split on CPU: stages built from one model, chained through IntermediateTensors,
give the whole model's logits and greedy tokens; layers a stage does not own hold nothing."""
from __future__ import annotations

import copy

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.parallel.pipeline import LocalPipeline, PPMissingLayer, layer_range, split_stage
from tests.llama_fixtures import make_llama
from tests.moe_fixtures import make_moe

PROMPTS = [[1, 17, 42, 99, 3, 150, 64, 8], [5, 6, 7, 120, 33]]


def test_layer_range_follows_vllm():
    # 10 layers over 4 stages: [2, 3, 3, 2] (the remainder to the stages before the last)
    assert [layer_range(10, r, 4) for r in range(4)] == [(0, 2), (2, 5), (5, 8), (8, 10)]
    assert [layer_range(4, r, 2) for r in range(2)] == [(0, 2), (2, 4)]
    assert layer_range(3, 0, 1) == (0, 3)
    with pytest.raises(ValueError, match="2 layers cannot fill 3 pipeline stages"):
        layer_range(2, 0, 3)


@pytest.mark.parametrize("case", ["llama", "qwen3_moe"])
@pytest.mark.parametrize("pp", [2, 3])
def test_stages_chained_equal_the_whole_model(tmp_path, case, pp):
    if case == "llama":
        make_llama(tmp_path, "gqa", num_hidden_layers=5)
    else:
        make_moe(tmp_path, "qwen3_moe_norm", num_hidden_layers=5)
    llm = LLM(tmp_path, dtype="float32", max_model_len=64)
    want_logits = llm.score(PROMPTS[0])
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    want = llm.generate(PROMPTS, params)
    whole = llm.model
    stages = []
    for rank in range(pp):
        stage = copy.deepcopy(whole)  # the KV caches the engine bound come along: each stage uses its layers' own
        span = split_stage(stage, rank, pp)
        layers = stage.model.layers
        assert all(isinstance(layers[i], PPMissingLayer) != (span.start <= i < span.end) for i in range(len(layers)))
        owned = sum(p.numel() for i in range(span.start, span.end) for p in layers[i].parameters())
        assert sum(p.numel() for p in layers.parameters()) == owned  # missing layers hold no parameters
        stages.append(stage)
    with pytest.raises(RuntimeError, match="belongs to another pipeline stage"):
        next(m for m in stages[0].model.layers._modules.values() if isinstance(m, PPMissingLayer))(None)
    llm.runner.model = LocalPipeline(stages)  # the rocm runner drives the chained stages as one model
    torch.testing.assert_close(llm.score(PROMPTS[0]), want_logits, atol=1e-5, rtol=1e-5)
    assert llm.generate(PROMPTS, params) == want
