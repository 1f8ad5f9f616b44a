"""Issue 26's attention vocabulary against transformers: Command R+'s per-head QK LayerNorm stored as one
``[heads, head_dim]`` weight (specs/cohere.yaml ``use_qk_norm``; gqa ``qk_norm.scope: stacked``).

Each case is a tiny random checkpoint (runtime/testing/tiny_models.py: GQA 4 query / 2 KV heads, 4 layers, norm
weights perturbed off their initial constants) with the family's optional features switched on; gates as for the other
families: fp32 prefill logits within 1e-4 and 16 greedy tokens equal to transformers' (teacher-forced), on rocm and
neuron, plus bf16 three-way for one case per family. The negative controls switch each feature off (in modelgen's model
or in the reference) and require the logits to move far past the tolerance.
"""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt
from tests.parity_helpers import assert_bf16_three_way, assert_fp32_parity, assert_tp2_matches_tp1, hf_logits

TARGETS = ["rocm", "neuron"]
PREFILL_ATOL = 1e-4
PROMPT = tiny_prompt()  # 24 tokens
SCALE = dict(initializer_range=0.1)  # weights 5x transformers' default: logits of order 1, so each feature shows

# name -> (architecture, config overrides)
CASES: dict[str, tuple[str, dict]] = {
    # Command R+: q_norm [4, 16] and k_norm [2, 16] LayerNorms (own row per head) before the interleaved RoPE.
    "cohere_qk_norm": ("CohereForCausalLM", dict(use_qk_norm=True, logit_scale=0.3, attention_bias=True)),
    # MQA: one KV head, so under TP=2 the k_norm row is held by both ranks.
    "cohere_qk_norm_mqa": ("CohereForCausalLM", dict(use_qk_norm=True, num_key_value_heads=1)),
}
THREE_WAY = ["cohere_qk_norm"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            arch, overrides = CASES[name]
            d = tmp_path_factory.mktemp(name)
            cache[name] = (d, make_tiny_checkpoint(d, arch, **SCALE, **overrides))
        return cache[name]

    return get


def _llm(path, target: str, **kw) -> LLM:
    return LLM(path, target=target, dtype="float32", max_model_len=128, **kw)


def _err(llm: LLM, ref: torch.Tensor) -> float:
    return (llm.score(PROMPT).float() - ref).abs().max().item()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_hf_fp32(checkpoint, name, target):
    path, hf = checkpoint(name)
    # strict: every config.json key read or declared irrelevant
    assert_fp32_parity(_llm(path, target, strict_config=True), hf, PROMPT, PREFILL_ATOL, f"{name}/{target}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", THREE_WAY)
def test_against_hf_bf16_three_way(checkpoint, name, target):
    path, hf = checkpoint(name)
    assert_bf16_three_way(path, target, hf, PROMPT, f"{name}/{target}")


def _attentions(llm: LLM):
    return [layer.self_attn for layer in llm.model.model.layers]


@pytest.mark.parametrize("target", TARGETS)
def test_cohere_qk_norm_moves_the_logits(checkpoint, target):
    """Negative controls: the norms switched off, or one weight row per head replaced by the first row (a norm that
    read one [head_dim] weight for every head), are other models."""
    path, hf = checkpoint("cohere_qk_norm")
    ref = hf_logits(hf, PROMPT)
    llm = _llm(path, target)
    assert _err(llm, ref) < PREFILL_ATOL
    for attn in _attentions(llm):
        attn.use_qk_norm = False
    assert _err(llm, ref) > 1e-2
    llm = _llm(path, target)
    with torch.no_grad():
        for attn in _attentions(llm):
            attn.q_norm.weight.copy_(attn.q_norm.weight[:1].expand_as(attn.q_norm.weight))
    assert _err(llm, ref) > 1e-2


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_cohere_qk_norm_tensor_parallel_2_matches_1(checkpoint, tmp_path, target, name):
    """TP=2 over gloo: each rank holds its query heads' rows of q_norm and its KV head's row of k_norm (the MQA head's
    row on both ranks): logits and greedy tokens equal TP=1's."""
    assert_tp2_matches_tp1(checkpoint(name)[0], target, PROMPT, tmp_path)
