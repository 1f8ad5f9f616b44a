"""Sequence parallelism (rocm, TP=2 on gloo): token-split residual stream, reduce-scatter / all-gather around the
TP GEMMs, embedding scatter; logits and greedy tokens equal TP=1, odd token counts included (padded last chunk)."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from tests.llama_fixtures import make_llama
from tests.moe_fixtures import make_moe

PROMPTS = [[1, 17, 42, 99, 3, 150, 64, 8, 9], [5, 6, 7, 120, 33]]  # 9 and 5 tokens: the last chunk is padded
GREEDY = SamplingParams(max_new_tokens=6, ignore_eos=True)


def test_single_rank_is_untouched(tmp_path):
    from modelgen.runtime.parallel.sequence import enable_sequence_parallel

    make_llama(tmp_path, "gqa")
    llm = LLM(tmp_path, dtype="float32", max_model_len=64)
    assert enable_sequence_parallel(llm.model) == 0  # world 1: nothing to split
    with pytest.raises(ValueError, match="sequence_parallel is implemented for the rocm target, not neuron"):
        LLM(tmp_path, target="neuron", dtype="float32", max_model_len=64, sequence_parallel=True)


@pytest.mark.slow
@pytest.mark.parametrize("case,ep", [("llama_bias", None), ("qwen3_moe", 2), ("qwen3_moe", 1)])
def test_sequence_parallel_equals_tp1(tmp_path, case, ep):
    if case == "llama_bias":  # row-parallel biases added once, on the shard
        make_llama(tmp_path, "bias")
    else:
        make_moe(tmp_path, "qwen3_moe_norm")
    one = LLM(tmp_path, dtype="float32", max_model_len=64)
    want_logits, want = one.score(PROMPTS[0]), one.generate(PROMPTS, GREEDY)
    llm = LLM(tmp_path, dtype="float32", max_model_len=64, tensor_parallel_size=2, expert_parallel_size=ep,
              sequence_parallel=True)
    try:
        from modelgen.runtime.parallel.sequence import _embedding_forward

        embed = next(m for n, m in llm.model.named_modules() if n.endswith("embed_tokens"))
        assert embed.forward.__func__ is _embedding_forward  # the model really runs sequence-parallel
        rows = []
        norm = next(m for n, m in llm.model.named_modules() if n.endswith("layers.0.input_layernorm"))
        hook = norm.register_forward_hook(lambda mod, args, out: rows.append(args[0].shape[0]))
        torch.testing.assert_close(llm.score(PROMPTS[0]), want_logits, atol=1e-4, rtol=1e-4)
        hook.remove()
        assert rows == [5]  # the norm ran on this rank's ceil(9 / 2) tokens
        assert llm.generate(PROMPTS, GREEDY) == want
    finally:
        llm.close()
    assert not dist.is_initialized()
