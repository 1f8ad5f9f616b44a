"""Falcon (specs/falcon.yaml) against transformers' FalconForCausalLM (issue 26), on every query_key_value layout and
residual layout the config can switch on.

Cases: falcon-7B's multi-query layout ([all q | k | v], one group) with one shared input_layernorm; falcon-40B's
new_decoder_architecture with 2 KV groups ([kv, q_per_kv + 2, head_dim]) and its own ln_attn / ln_mlp, with biases;
the same with num_ln_in_parallel_attn 1 (Falcon2-11B: one shared norm); the old multi-head layout ([heads, 3,
head_dim]) with the sequential layer (parallel_attn false) and gelu_fast; untied embeddings and another rope_theta.
Gates: fp32 prefill logits within 1e-4 and 16 greedy tokens equal to transformers' (teacher-forced), bf16 three-way
for two cases, on rocm and neuron. Negative controls: the grouped query_key_value read as contiguous [q | k | v], the
MLP's own ln_mlp replaced by ln_attn, the parallel layer run sequentially, and the bias each move the logits.

ALiBi (``alibi: true``, falcon-rw: no RoPE, a per-head linear position bias ``slopes[h] * k / sqrt(head_dim)`` on the
scores, HF ``build_alibi_tensor``): 4 heads multi-query, 6 heads (not a power of two: the odd-power slopes) in the new
architecture with 2 KV groups and in the old multi-head sequential layout, and 16 heads (slopes not powers of two, so
HF's bfloat16 product matters); the same gates, then several sequences through the paged cache with chunked prefill
and verify-shaped steps, TP=2 = TP=1 (each rank its heads' slopes), neuron buckets with fullgraph=True. Negative
controls: slopes zeroed, the power-of-two rule applied to 6 heads, the product in float32 on 16 heads, and
transformers' model with alibi off (RoPE instead) each move the logits.
"""
from __future__ import annotations

import pytest

from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint
from tests.family_parity import (
    PREFILL_ATOL, PROMPT, TARGETS, assert_bf16_three_way, assert_fp32_parity, checkpoint_getter, err_after,
)
from tests.parity_helpers import (
    assert_engine_batch_matches_hf, assert_neuron_buckets_fullgraph, assert_tp2_matches_tp1, hf_logits, llm,
)

SCALE = dict(initializer_range=0.1)
ARCH = "FalconForCausalLM"
NEW = dict(new_decoder_architecture=True, num_kv_heads=2)
SIX = dict(num_attention_heads=6, hidden_size=96)  # head_dim 16

# name -> (config overrides, transformers v5 names on save)
CASES: dict[str, tuple[dict, bool]] = {
    "multi_query": (dict(multi_query=True, parallel_attn=True), False),
    "new_arch_two_norms": (dict(NEW, bias=True, activation="gelu_pytorch_tanh"), False),
    "new_arch_one_norm": (dict(NEW, num_ln_in_parallel_attn=1, tie_word_embeddings=False,
                               rope_parameters=dict(rope_type="default", rope_theta=500.0)), True),
    "multi_head_sequential": (dict(multi_query=False, parallel_attn=False, activation="gelu_fast", bias=True), False),
    "alibi_multi_query": (dict(alibi=True, multi_query=True, parallel_attn=True), False),
    "alibi_new_arch_6_heads": (dict(SIX, **NEW, alibi=True, bias=True), False),
    "alibi_multi_head_6_heads": (dict(SIX, alibi=True, multi_query=False, parallel_attn=False), True),
    "alibi_16_heads": (dict(alibi=True, num_attention_heads=16, hidden_size=128, multi_query=True), False),
}
THREE_WAY = ["multi_query", "new_arch_two_norms", "alibi_multi_query", "alibi_16_heads"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    def make(d, name: str):
        overrides, v5_names = CASES[name]
        return make_tiny_checkpoint(d, ARCH, fused_experts=v5_names, **SCALE, **overrides)

    return checkpoint_getter(tmp_path_factory, make)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_falcon_fp32(checkpoint, name, target):
    path, hf = checkpoint(name)
    assert_fp32_parity(path, hf, name, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", THREE_WAY)
def test_against_falcon_bf16_three_way(checkpoint, name, target):
    path, hf = checkpoint(name)
    assert_bf16_three_way(path, hf, name, target)


@pytest.mark.parametrize("target", TARGETS)
def test_each_feature_moves_the_logits(checkpoint, target):
    """Parity means the features are implemented: each, switched off, moves the logits far past PREFILL_ATOL."""
    path, hf = checkpoint("new_arch_two_norms")
    ref = hf_logits(hf, PROMPT)
    layers = lambda m: m.transformer.layers  # noqa: E731
    assert err_after(path, ref, lambda m: None, target) < PREFILL_ATOL

    def contiguous_qkv(m):  # [all q | k | v] (falcon-7B's reading) instead of per KV group
        for layer, hf_layer in zip(layers(m), hf.transformer.h):
            fused = hf_layer.self_attention.query_key_value
            if target == "rocm":
                layer.self_attention.qkv_proj.weight.copy_(fused.weight)
                layer.self_attention.qkv_proj.bias.copy_(fused.bias)
            else:
                layer.self_attention.qkv_proj_weight.copy_(fused.weight.T)
                layer.self_attention.qkv_proj_bias.copy_(fused.bias)
    assert err_after(path, ref, contiguous_qkv, target) > 1e-2

    def shared_norm(m):  # ln_mlp replaced by ln_attn (num_ln_in_parallel_attn 1)
        for layer in layers(m):
            layer.post_attention_layernorm.weight.copy_(layer.input_layernorm.weight)
            layer.post_attention_layernorm.bias.copy_(layer.input_layernorm.bias)
    assert err_after(path, ref, shared_norm, target) > 1e-2

    def no_mlp_bias(m):
        for layer in layers(m):
            (layer.mlp.up_proj_bias if target == "neuron" else layer.mlp.up_proj.bias).zero_()
    assert err_after(path, ref, no_mlp_bias, target) > 1e-2

    path, hf = checkpoint("multi_head_sequential")  # parallel_attn false: run it as a parallel layer instead
    ref = hf_logits(hf, PROMPT)
    assert err_after(path, ref, lambda m: None, target) < PREFILL_ATOL
    parallel = lambda m: [setattr(x, "parallel_residual", True) for x in layers(m)]  # noqa: E731
    assert err_after(path, ref, parallel, target) > 1e-2


def _alibi_attentions(model, target: str):
    """The ALiBi holders of modelgen's model: PagedAttention (rocm) or the attention module (neuron)."""
    attns = [layer.self_attention for layer in model.transformer.layers]
    return [a.attn for a in attns] if target == "rocm" else attns


@pytest.mark.parametrize("target", TARGETS)
def test_alibi_moves_the_logits(checkpoint, tmp_path, target):
    """Negative controls: the slopes zeroed (no bias), the 6-head slopes by the power-of-two rule alone (2 ** (-8 i /
    6)), the 16-head bias formed in float32 instead of HF's bfloat16, and transformers' model with alibi off (RoPE,
    same weights) each move the logits; on a GPU the ALiBi layers take the torch path, reason named."""
    import torch

    from modelgen.runtime.layers.attention.layer import TORCH_ONLY

    path, hf = checkpoint("alibi_new_arch_6_heads")
    ref = hf_logits(hf, PROMPT)
    assert err_after(path, ref, lambda m: None, target) < PREFILL_ATOL

    def no_slopes(m):
        for a in _alibi_attentions(m, target):
            a.alibi_slopes.zero_()
    assert err_after(path, ref, no_slopes, target) > 1e-2

    def power_of_two_rule(m):
        for a in _alibi_attentions(m, target):
            a.alibi_slopes.copy_(2.0 ** (-8.0 * torch.arange(1, 7) / 6))
    assert err_after(path, ref, power_of_two_rule, target) > 1e-2

    overrides, _ = CASES["alibi_new_arch_6_heads"]
    rope = make_tiny_checkpoint(tmp_path / "rope", ARCH, **SCALE, **dict(overrides, alibi=False))
    assert (hf_logits(rope, PROMPT) - ref).abs().max().item() > 1e-2
    assert err_after(path, hf_logits(rope, PROMPT), lambda m: None, target) > 1e-2

    path, hf = checkpoint("alibi_16_heads")
    ref = hf_logits(hf, PROMPT)
    assert err_after(path, ref, lambda m: None, target) < PREFILL_ATOL

    def float32_product(m):
        for a in _alibi_attentions(m, target):
            a.alibi_bf16 = False
    assert err_after(path, ref, float32_product, target) > 2 * PREFILL_ATOL
    if target == "rocm":
        model = llm(path, target, max_model_len=64)
        assert {a.torch_only for a in _alibi_attentions(model.model, target)} == {TORCH_ONLY["alibi"]}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["alibi_multi_query", "alibi_new_arch_6_heads"])
def test_alibi_through_the_engine(checkpoint, target, name):
    """Several sequences through the paged cache with chunked prefill, verify-shaped steps and paged decode."""
    path, hf = checkpoint(name)
    assert_engine_batch_matches_hf(path, hf, target, name)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["alibi_new_arch_6_heads", "alibi_multi_query"])
def test_alibi_tensor_parallel_2_matches_1(checkpoint, tmp_path, target, name):
    """TP=2 over gloo: each rank holds 3 (or 2) of the heads and their slopes; logits and greedy tokens equal TP=1's."""
    assert_tp2_matches_tp1(checkpoint(name)[0], target, PROMPT, tmp_path)


@pytest.mark.slow
def test_alibi_neuron_buckets_fullgraph(checkpoint):
    path, hf = checkpoint("alibi_new_arch_6_heads")
    assert_neuron_buckets_fullgraph(path, hf, [PROMPT, PROMPT[:13]], prefill_buckets=[16, 64], decode_buckets=[1, 2],
                                    decode_context_buckets=[64])


def test_alibi_with_rope_is_a_spec_error(tmp_path):
    """ALiBi replaces RoPE: a gqa block with both is refused at the field; with rope off it compiles."""
    import json

    from modelgen.codegen.errors import SpecError
    from modelgen.codegen.lower import compile_spec
    from modelgen.codegen.spec_file import REPO_ROOT
    from modelgen.codegen.yaml_source import load_yaml

    data, _ = load_yaml(REPO_ROOT / "specs" / "llama.yaml")
    data["blocks"]["decoder"]["attention"]["alibi"] = {"scale": 1.0}
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match=r"attention\.alibi"):
        compile_spec(path)
    data["blocks"]["decoder"]["attention"]["rope"]["enabled"] = False
    path.write_text(json.dumps(data))
    assert compile_spec(path).blocks[0].attention.alibi is not None
