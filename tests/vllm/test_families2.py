"""The round-2 families' vllm-target models (issue 26; StarCoder2 and Phi-2 for the ungated MLP, Phi-2's LM-head bias), served by real vLLM, on the feature-on configs of
tests/test_parity_families2.py: greedy tokens equal transformers' float32 choices, teacher-forced (harness.py).

vLLM's CPU attention takes head sizes 32..512, so every case has head_dim 32 (families that derive it from the width:
hidden_size 128).
"""
from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm")

from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt  # noqa: E402
from tests.vllm.harness import serve, teacher_forced_misses  # noqa: E402

WINDOW = 6
WIDE = dict(hidden_size=128)  # head_dim = hidden_size // heads = 32
HD = dict(head_dim=32)
SCALE = dict(initializer_range=0.1)
# name -> (architecture, config overrides, fused expert tensors)
CASES: dict[str, tuple[str, dict, bool]] = {
    "cohere": ("CohereForCausalLM", dict(WIDE, logit_scale=0.3, attention_bias=True), False),
    "olmoe_clip": ("OlmoeForCausalLM", dict(WIDE, clip_qkv=0.3, norm_topk_prob=True, attention_bias=True), False),
    "olmoe_fused": ("OlmoeForCausalLM", dict(WIDE, clip_qkv=0.5), True),
    "granitemoe": ("GraniteMoeForCausalLM", dict(
        HD, embedding_multiplier=6.0, residual_multiplier=0.3, attention_multiplier=0.05, logits_scaling=4.0), False),
    "granitemoe_fused": ("GraniteMoeForCausalLM", dict(HD, embedding_multiplier=3.0, logits_scaling=0.5), True),
    "smollm3": ("SmolLM3ForCausalLM", dict(
        HD, no_rope_layers=[1, 0, 1, 0], use_sliding_window=True, sliding_window=WINDOW, attention_bias=True,
        mlp_bias=True, layer_types=["sliding_attention", "full_attention", "full_attention", "sliding_attention"]),
        False),
    "exaone4": ("Exaone4ForCausalLM", dict(
        WIDE, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"]), False),
    "ernie4_5": ("Ernie4_5ForCausalLM", dict(HD, use_bias=True, tie_word_embeddings=True), False),
    "glm4": ("Glm4ForCausalLM", dict(
        HD, rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.75)), False),
    "starcoder2": ("Starcoder2ForCausalLM", dict(WIDE, use_bias=True, sliding_window=WINDOW), False),
    "phi": ("PhiForCausalLM", dict(
        WIDE, qk_layernorm=True, rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                      partial_rotary_factor=0.4)), False),
    # Without mrope_section: with it vLLM switches to M-RoPE positions, which its CPU runner refuses (Qwen2-VL's
    # transformers model needs it, so Qwen2-VL is not served here: tests/vllm/test_vllm_parity.py CPU_UNSUPPORTED).
    "qwen3_vl": ("Qwen3VLForConditionalGeneration", dict(HD, attention_bias=True), False),
}
PROMPTS = [tiny_prompt(), tiny_prompt(seed=3, length=40)]


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_tokens_equal_transformers(tmp_path, name):
    arch, overrides, fused = CASES[name]
    hf = make_tiny_checkpoint(tmp_path, arch, fused_experts=fused, **SCALE, **overrides)
    served = serve(tmp_path, PROMPTS, max_tokens=8)
    assert served.model_class.startswith("modelgen.generated.vllm."), served.model_class
    misses = {len(p): teacher_forced_misses(hf, p, t) for p, t in zip(PROMPTS, served.tokens)}
    assert not any(misses.values()), misses
    assert all(len(t) == 8 for t in served.tokens)
