"""MLP data parallelism (rocm, world 2 on gloo): each gated MLP re-sharded inside data-parallel groups, each group
on its chunk of the tokens; logits and greedy tokens equal one rank."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from tests.llama_fixtures import make_llama
from tests.moe_fixtures import make_moe

PROMPTS = [[1, 17, 42, 99, 3, 150, 64, 8, 9], [5, 6, 7, 120, 33]]
GREEDY = SamplingParams(max_new_tokens=6, ignore_eos=True)


def test_sizes_are_checked(tmp_path):
    make_llama(tmp_path, "gqa")
    with pytest.raises(ValueError, match="mlp_data_parallel_size 2 does not divide the world size 1"):
        LLM(tmp_path, mlp_data_parallel_size=2)
    with pytest.raises(ValueError, match="component data parallelism {'mlp_dp_size': 2} is not generated"):
        LLM(tmp_path, target="neuron", tensor_parallel_size=2, mlp_data_parallel_size=2)
    assert not dist.is_initialized()


@pytest.mark.slow
@pytest.mark.parametrize("case", ["llama_bias", "qwen3_moe"])
def test_mlp_data_parallel_equals_one_rank(tmp_path, case):
    if case == "llama_bias":  # the down bias added once per group's chunk
        make_llama(tmp_path, "bias")
        hidden, inter = 64, 96
    else:  # layer 1 is a dense MLP (mlp_only_layers); the MoE layers keep expert parallelism
        make_moe(tmp_path, "qwen3_moe_norm")
        hidden, inter = 64, 96
    one = LLM(tmp_path, dtype="float32", max_model_len=64)
    want_logits, want = one.score(PROMPTS[0]), one.generate(PROMPTS, GREEDY)
    llm = LLM(tmp_path, dtype="float32", max_model_len=64, tensor_parallel_size=2, mlp_data_parallel_size=2)
    try:
        # D = 2 groups of one rank: each rank holds the whole dense MLP and runs it on half the tokens
        gate_up = next(m for n, m in llm.model.named_modules() if n.endswith("mlp.gate_up_proj"))
        assert tuple(gate_up.weight.shape) == (2 * inter, hidden)
        rows = []
        hook = gate_up.register_forward_hook(lambda mod, args, out: rows.append(args[0].shape[0]))
        torch.testing.assert_close(llm.score(PROMPTS[0]), want_logits, atol=1e-4, rtol=1e-4)
        hook.remove()
        assert rows == [5]  # ceil(9 / 2) tokens on this rank's group
        assert llm.generate(PROMPTS, GREEDY) == want
    finally:
        llm.close()
    assert not dist.is_initialized()
