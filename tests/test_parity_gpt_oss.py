"""GPT-OSS (specs/gpt_oss.yaml) vs transformers' GptOssForCausalLM, both targets, on tiny random checkpoints whose
40-token prompt is five sliding windows long: sinks, windows, biased router and experts, clamped SwiGLU, the fused
interleaved expert layout and YaRN all act on these logits.

Gates as for the other parity tests: fp32 prefill logits within 1e-4 and 16 greedy tokens equal; three-way bf16
(HF fp32 gold, HF bf16 floor, modelgen bf16 within 2x the floor's error + 1e-2 for router near-ties).
"""
from __future__ import annotations

import copy

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.testing import assert_close_three_way
from tests.gpt_oss_fixtures import CASES, PROMPT, make_gpt_oss
from tests.test_parity_llama import THREE_WAY_FACTOR, hf_greedy, hf_logits

TARGETS = ["rocm", "neuron"]
MOE_THREE_WAY_ATOL = 1e-2


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            d = tmp_path_factory.mktemp(f"gpt_oss_{name}")
            overrides = dict(CASES[name])
            cache[name] = (d, make_gpt_oss(d, seed=overrides.pop("seed", 0), **overrides))
        return cache[name]

    return get


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_hf_fp32(checkpoints, name, target):
    path, hf = checkpoints(name)
    llm = LLM(path, target=target, dtype="float32", max_model_len=128)
    err = (llm.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < 1e-4, f"{name}/{target}: prefill logits differ by {err}"
    out = llm.generate([PROMPT], SamplingParams(max_new_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy(hf, PROMPT, 16)


@pytest.mark.parametrize("target", TARGETS)
def test_against_hf_bf16_three_way(checkpoints, target):
    path, hf = checkpoints("default")
    gold = hf_logits(hf, PROMPT)
    floor = hf_logits(copy.deepcopy(hf).to(torch.bfloat16), PROMPT)
    ours = LLM(path, target=target, dtype="bfloat16", max_model_len=128).score(PROMPT).float()
    assert_close_three_way(gold, floor, ours, factor=THREE_WAY_FACTOR, atol=MOE_THREE_WAY_ATOL, name=f"gpt_oss/{target}")


def test_layer_schedule_follows_layer_types(checkpoints):
    """The block rule gives a layer a window exactly where HF's GptOssAttention has one."""
    for name in ("default", "schedule"):
        path, hf = checkpoints(name)
        llm = LLM(path, target="rocm", dtype="float32", max_model_len=64)
        ours = [layer.self_attn.attn.sliding_window for layer in llm.model.model.layers]
        assert ours == [layer.self_attn.sliding_window for layer in hf.model.layers]
    assert ours == [None, 5, 5, None]


def test_each_feature_moves_the_logits(checkpoints):
    """The fixtures exercise what they claim: zeroing sinks, widening a window, dropping an expert or router bias
    each move modelgen's logits far beyond the parity tolerance (so parity means they are all implemented)."""
    path, hf = checkpoints("default")
    ref = hf_logits(hf, PROMPT)

    def err_after(edit) -> float:
        llm = LLM(path, target="rocm", dtype="float32", max_model_len=128)
        with torch.no_grad():
            edit(llm.model.model.layers[0])
        return (llm.score(PROMPT).float() - ref).abs().max().item()

    assert err_after(lambda layer: None) < 1e-4
    assert err_after(lambda layer: layer.self_attn.sinks.zero_()) > 1e-2
    assert err_after(lambda layer: setattr(layer.self_attn.attn, "sliding_window", None)) > 1e-2
    assert err_after(lambda layer: layer.mlp.experts.w13_bias.zero_()) > 1e-2
    assert err_after(lambda layer: layer.mlp.router.bias.zero_()) > 1e-3


@pytest.mark.slow
def test_tensor_parallel_2_matches_1(tmp_path):
    """TP=2 over gloo: each rank holds 2 of the 4 query heads with their sinks, 1 KV head and 2 of the 4 experts
    (with their biases); logits and greedy tokens equal TP=1's."""
    from tests.parity_helpers import assert_tp2_matches_tp1_on

    make_gpt_oss(tmp_path / "ckpt")  # once for both targets (one spawn)
    assert_tp2_matches_tp1_on(tmp_path / "ckpt", TARGETS, PROMPT, tmp_path, max_model_len=64, kv_heads=1)


@pytest.mark.slow
def test_neuron_buckets_fullgraph_without_recompiles(checkpoints):
    """Every prefill/decode bucket of the windowed, sink-bearing model traces with fullgraph=True, and serving after
    warm-up (contexts past the window, two batch sizes) never recompiles and equals eager."""
    torch._dynamo.reset()
    path, hf = checkpoints("default")
    buckets = dict(prefill_buckets=[16, 64], decode_buckets=[1, 2], decode_context_buckets=[64])
    llm = LLM(path, target="neuron", dtype="float32", max_model_len=64, block_size=8, max_num_seqs=2, compile=True,
              **buckets)
    llm.runner.warmup()
    prompts = [PROMPT, PROMPT[:12]]
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    torch.compiler.set_stance("fail_on_recompile")
    try:
        got = llm.generate(prompts, params)
        got_single = llm.generate([PROMPT], params)
    finally:
        torch.compiler.set_stance("default")
    expected = [hf_greedy(hf, p, 6) for p in prompts]
    assert got == expected
    assert got_single == [expected[0]]


# Configurations beyond the fixtures (drawn once at random, kept fixed): window 1 / 3 / 64 on irregular layer_types,
# 2-8 experts with top-1..3, MQA to MHA, a binding or a loose clamp.
SWEEP = [
    dict(num_hidden_layers=3, sliding_window=3, layer_types=["full_attention", "full_attention", "sliding_attention"],
         num_local_experts=2, num_experts_per_tok=1, num_key_value_heads=2),
    dict(num_hidden_layers=2, sliding_window=1, layer_types=["sliding_attention", "sliding_attention"],
         num_local_experts=8, num_experts_per_tok=2, num_key_value_heads=1),
    dict(num_hidden_layers=5, sliding_window=64, num_local_experts=8, num_experts_per_tok=3, num_key_value_heads=4,
         swiglu_limit=0.3, layer_types=["full_attention", "full_attention", "sliding_attention", "full_attention",
                                        "sliding_attention"]),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", range(len(SWEEP)))
def test_other_configurations_teacher_forced(tmp_path, case, target):
    """Greedy tokens are checked against HF's *forward* on prompt + our tokens (each one must be HF's argmax at its
    step), not against ``generate()``: with sliding_window 1, transformers' generate() (its sliding-window cache)
    departs from its own forward at the second new token (measured: our 16 tokens equal the forward's argmaxes and
    our logits over the whole sequence match the forward within 1.2e-7; generate()'s tokens are not the forward's)."""
    hf = make_gpt_oss(tmp_path, seed=10 + case, **SWEEP[case])
    llm = LLM(tmp_path, target=target, dtype="float32", max_model_len=128, block_size=4)
    ours = llm.generate([PROMPT], SamplingParams(max_new_tokens=16, ignore_eos=True))[0]
    seq = PROMPT + ours
    ref = hf_logits(hf, seq)
    assert ref[len(PROMPT) - 1:-1].argmax(dim=-1).tolist() == ours
    err = (llm.score(seq).float() - ref).abs().max().item()
    assert err < 1e-4, f"case {case}/{target}: logits differ from HF's forward by {err}"
