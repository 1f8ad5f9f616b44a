"""GPT-NeoX, DBRX and Falcon (issue 26; Falcon with and without ALiBi) on the vllm target, served by real vLLM, on feature-on configs of
tests/test_parity_{gpt_neox,dbrx,falcon}.py: greedy tokens equal transformers' float32 choices, teacher-forced
(harness.py). vLLM's CPU attention takes head sizes 32..512: hidden size 128 over 4 heads.
"""
from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm")

from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt  # noqa: E402
from tests.vllm.harness import serve, teacher_forced_misses  # noqa: E402

WIDE = dict(hidden_size=128)  # head_dim = hidden_size // heads = 32
SCALE = dict(initializer_range=0.1)
# name -> (architecture, config overrides, transformers v5 names on save)
CASES: dict[str, tuple[str, dict, bool]] = {
    "gpt_neox_parallel": ("GPTNeoXForCausalLM", dict(WIDE, use_parallel_residual=True, hidden_act="gelu"), False),
    "gpt_neox_sequential": ("GPTNeoXForCausalLM", dict(
        WIDE, use_parallel_residual=False, hidden_act="gelu_fast", attention_bias=False,
        rope_parameters=dict(rope_type="default", rope_theta=500.0, partial_rotary_factor=1.0)), True),
    "falcon_multi_query": ("FalconForCausalLM", dict(WIDE, multi_query=True), False),
    "falcon_new_arch": ("FalconForCausalLM", dict(WIDE, new_decoder_architecture=True, num_kv_heads=2, bias=True),
                        False),
    # ALiBi (no RoPE): 4 heads multi-query; 6 heads (not a power of two) over 2 KV groups. vLLM's CPU attention adds
    # slopes[h] * (k - q) in float32: the 4 / 6-head slopes are powers of two, so HF's bfloat16 product is exact too
    "falcon_alibi_multi_query": ("FalconForCausalLM", dict(WIDE, alibi=True, multi_query=True), False),
    "falcon_alibi_6_heads": ("FalconForCausalLM", dict(hidden_size=192, num_attention_heads=6, alibi=True,
                                                       new_decoder_architecture=True, num_kv_heads=2), False),
    # 16 heads: slopes 2 ** (-i / 2), not powers of two, rounded to bfloat16 as HF does
    "falcon_alibi_16_heads": ("FalconForCausalLM", dict(hidden_size=512, num_attention_heads=16, alibi=True,
                                                        multi_query=True), False),
    "falcon_sequential": ("FalconForCausalLM", dict(WIDE, multi_query=False, parallel_attn=False,
                                                    activation="gelu_fast", tie_word_embeddings=False), True),
    # DBRX: sizes under its own names; clip_qkv binding, and far above every value (transformers cannot run null)
    "dbrx_clip": ("DbrxForCausalLM", dict(
        d_model=128, n_heads=4, n_layers=4, max_seq_len=2048,
        attn_config=dict(kv_n_heads=2, rope_theta=10000.0, clip_qkv=0.3),
        ffn_config=dict(ffn_hidden_size=32, moe_num_experts=4, moe_top_k=2, moe_normalize_expert_weights=1.0)), False),
    "dbrx_no_norm": ("DbrxForCausalLM", dict(
        d_model=128, n_heads=4, n_layers=4, max_seq_len=2048,
        attn_config=dict(kv_n_heads=2, rope_theta=10000.0, clip_qkv=1000.0),
        ffn_config=dict(ffn_hidden_size=32, moe_num_experts=4, moe_top_k=3, moe_normalize_expert_weights=None)),
        False),
    # p-norms of the top-k weights (vLLM's FusedMoE with modelgen's custom_routing_function)
    "dbrx_p2": ("DbrxForCausalLM", dict(
        d_model=128, n_heads=4, n_layers=4, max_seq_len=2048,
        attn_config=dict(kv_n_heads=2, rope_theta=10000.0, clip_qkv=0.3),
        ffn_config=dict(ffn_hidden_size=32, moe_num_experts=4, moe_top_k=2, moe_normalize_expert_weights=2.0)), False),
    "dbrx_p1_5": ("DbrxForCausalLM", dict(
        d_model=128, n_heads=4, n_layers=4, max_seq_len=2048,
        attn_config=dict(kv_n_heads=2, rope_theta=10000.0, clip_qkv=1000.0),
        ffn_config=dict(ffn_hidden_size=32, moe_num_experts=4, moe_top_k=3, moe_normalize_expert_weights=1.5)),
        False),
}
PROMPTS = [tiny_prompt(), tiny_prompt(seed=3, length=40)]
# negative controls: the same weights with the feature off choose other tokens (so the feature was served)
FEATURE_OFF = {name: dict(alibi=False) for name in ("falcon_alibi_multi_query", "falcon_alibi_6_heads",
                                                    "falcon_alibi_16_heads")}


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_tokens_equal_transformers(tmp_path, name):
    arch, overrides, v5_names = CASES[name]
    hf = make_tiny_checkpoint(tmp_path, arch, fused_experts=v5_names, **SCALE, **overrides)
    served = serve(tmp_path, PROMPTS, max_tokens=8)
    assert served.model_class.startswith("modelgen.generated.vllm."), served.model_class
    misses = {len(p): teacher_forced_misses(hf, p, t) for p, t in zip(PROMPTS, served.tokens)}
    assert not any(misses.values()), misses
    if name in FEATURE_OFF:
        off = make_tiny_checkpoint(tmp_path / "off", arch, **SCALE, **dict(overrides, **FEATURE_OFF[name]))
        assert any(teacher_forced_misses(off, p, t) for p, t in zip(PROMPTS, served.tokens))
    assert all(len(t) == 8 for t in served.tokens)
