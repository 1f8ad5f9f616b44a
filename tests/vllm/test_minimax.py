"""MiniMax's vllm-target model (specs/minimax.yaml: the lightning_attention kind on vLLM's own linear-attention layer
with transformers' constants and modelgen's torch compute; the residual_scale joins) served by real vLLM: greedy
tokens equal transformers' float32 choices, teacher-forced (harness.py), on prompts of 24 and 40 tokens (past the
prefill block of 8 and the sliding window of 6), both layer kinds, every alpha / beta away from 1, per-expert and fused
experts. head_dim 32: vLLM's CPU attention takes head sizes 32..512.
"""
from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm")

from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt  # noqa: E402
from tests.vllm.harness import serve, teacher_forced_misses  # noqa: E402

FACTORS = dict(full_attn_alpha_factor=0.7, full_attn_beta_factor=1.3, linear_attn_alpha_factor=1.2,
               linear_attn_beta_factor=0.6, mlp_alpha_factor=0.9, mlp_beta_factor=1.4)
CASES: dict[str, tuple[dict, bool]] = {
    "minimax": (dict(head_dim=32, sliding_window=6, block_size=8, **FACTORS), False),
    "minimax_fused": (dict(head_dim=32, sliding_window=None, block_size=8,
                           layer_types=["linear_attention"] * 3 + ["full_attention"], **FACTORS), True),
}
PROMPTS = [tiny_prompt(), tiny_prompt(seed=3, length=40)]


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_tokens_equal_transformers(tmp_path, name):
    overrides, fused = CASES[name]
    hf = make_tiny_checkpoint(tmp_path, "MiniMaxForCausalLM", fused_experts=fused, initializer_range=0.1, **overrides)
    served = serve(tmp_path, PROMPTS, max_tokens=8)
    assert served.model_class.startswith("modelgen.generated.vllm."), served.model_class
    misses = {len(p): teacher_forced_misses(hf, p, t) for p, t in zip(PROMPTS, served.tokens)}
    assert not any(misses.values()), misses
    assert all(len(t) == 8 for t in served.tokens)
