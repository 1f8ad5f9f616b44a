"""Falcon (specs/falcon.yaml) against transformers' FalconForCausalLM (issue 26), on every query_key_value layout and
residual layout the config can switch on.

Cases: falcon-7B's multi-query layout ([all q | k | v], one group) with one shared input_layernorm; falcon-40B's
new_decoder_architecture with 2 KV groups ([kv, q_per_kv + 2, head_dim]) and its own ln_attn / ln_mlp, with biases;
the same with num_ln_in_parallel_attn 1 (Falcon2-11B: one shared norm); the old multi-head layout ([heads, 3,
head_dim]) with the sequential layer (parallel_attn false) and gelu_fast; untied embeddings and another rope_theta.
Gates: fp32 prefill logits within 1e-4 and 16 greedy tokens equal to transformers' (teacher-forced), bf16 three-way
for two cases, on rocm and neuron. Negative controls: the grouped query_key_value read as contiguous [q | k | v], the
MLP's own ln_mlp replaced by ln_attn, the parallel layer run sequentially, and the bias each move the logits.
``alibi: true`` is refused by name (the attention has no ALiBi bias yet).
"""
from __future__ import annotations

import pytest

from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint
from tests.family_parity import (
    PREFILL_ATOL, PROMPT, TARGETS, assert_bf16_three_way, assert_fp32_parity, checkpoint_getter, err_after,
)
from tests.parity_helpers import hf_logits, llm

SCALE = dict(initializer_range=0.1)
ARCH = "FalconForCausalLM"
NEW = dict(new_decoder_architecture=True, num_kv_heads=2)

# name -> (config overrides, transformers v5 names on save)
CASES: dict[str, tuple[dict, bool]] = {
    "multi_query": (dict(multi_query=True, parallel_attn=True), False),
    "new_arch_two_norms": (dict(NEW, bias=True, activation="gelu_pytorch_tanh"), False),
    "new_arch_one_norm": (dict(NEW, num_ln_in_parallel_attn=1, tie_word_embeddings=False,
                               rope_parameters=dict(rope_type="default", rope_theta=500.0)), True),
    "multi_head_sequential": (dict(multi_query=False, parallel_attn=False, activation="gelu_fast", bias=True), False),
}
THREE_WAY = ["multi_query", "new_arch_two_norms"]


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


@pytest.mark.parametrize("target", TARGETS)
def test_alibi_is_refused_by_name(tmp_path, target):
    from modelgen.runtime.hf_config import ConfigError

    make_tiny_checkpoint(tmp_path, ARCH, **SCALE, alibi=True)
    with pytest.raises(ConfigError, match="alibi"):
        llm(tmp_path, target, max_model_len=128)
