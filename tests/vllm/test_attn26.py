"""Issue 26's attention vocabulary on the vllm target, served by real vLLM (tests/test_parity_attn26.py's feature-on
configs): greedy tokens equal transformers' float32 choices, teacher-forced (harness.py). Command R+'s per-head QK
LayerNorm ([heads, head_dim] weights); HunYuan dense (QK RMSNorm after RoPE, NTK-alpha RoPE); Llama 4 text's dense
layers (NoPE, weightless QK norm after RoPE, temperature tuning), with chunked attention on its RoPE layers (vLLM's
ChunkedLocalAttention: chunks of 32 under 40- and 60-token prompts). vLLM's CPU attention
takes head sizes 32..512: hidden_size 128 over 4 heads, or head_dim 32.
"""
from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm")

from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt  # noqa: E402
from tests.vllm.harness import serve, teacher_forced_misses  # noqa: E402

WIDE = dict(hidden_size=128)  # head_dim = hidden_size // heads = 32
HD = dict(head_dim=32)
HUNYUAN_ALPHA = dict(rope_type="dynamic", alpha=1000.0, factor=1.0, rope_theta=10000.0)
SCALE = dict(initializer_range=0.1)
# name -> (architecture, config overrides)
CASES: dict[str, tuple[str, dict]] = {
    "cohere_qk_norm": ("CohereForCausalLM", dict(WIDE, use_qk_norm=True, logit_scale=0.3, attention_bias=True)),
    "hunyuan_alpha": ("HunYuanDenseV1ForCausalLM", dict(HD, attention_bias=True, rope_parameters=HUNYUAN_ALPHA)),
    # Llama 4's dense layers: NoPE on layers 1 and 3 with temperature tuning (floor_scale 4), weightless QK norm after
    # RoPE on the others (dense layers only; the MoE and chunked cases follow)
    # (a chunk as long as the context: this environment's transformers needs a chunk size for its reference)
    "llama4": ("Llama4ForCausalLM", dict(HD, moe_layers=[], attention_chunk_size=512, max_position_embeddings=512,
                                         intermediate_size_mlp=80,
                                         no_rope_layers=[1, 0, 1, 0], floor_scale=4, attn_scale=0.5)),
    # chunks of 32: the RoPE layers (0, 2) attend within their chunk, the NoPE layers globally
    "llama4_chunked": ("Llama4ForCausalLM", dict(HD, moe_layers=[], attention_chunk_size=32, intermediate_size_mlp=80,
                                                 no_rope_layers=[1, 0, 1, 0], floor_scale=4, attn_scale=0.5)),
}
PROMPTS = [tiny_prompt(), tiny_prompt(seed=3, length=40)]
# vLLM's ChunkedLocalAttention needs the chunk to be a multiple of the KV block size, which its CPU attention takes
# in multiples of 32: chunks of 32, and prompts of 40 and 60 tokens (the second's 8 new tokens cross position 64)
SERVE = {"llama4_chunked": dict(block_size=32)}
CASE_PROMPTS = {"llama4_chunked": [tiny_prompt(seed=3, length=40), tiny_prompt(seed=4, length=60)]}
# Llama 4's MoE layers (1 and 3, on a rotating and a NoPE layer): vLLM's FusedMoE with vLLM's own Llama 4 routing
# function and apply_router_weight_on_input, which vLLM implements for top-k 1 only (top-k 2: refused, tested below).
LLAMA4_MOE = dict(CASES["llama4"][1], moe_layers=None, interleave_moe_layer_step=2, num_experts_per_tok=1)
CASES["llama4_moe_top1"] = ("Llama4ForCausalLM", LLAMA4_MOE)


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_tokens_equal_transformers(tmp_path, name):
    arch, overrides = CASES[name]
    hf = make_tiny_checkpoint(tmp_path, arch, **SCALE, **overrides)
    prompts = CASE_PROMPTS.get(name, PROMPTS)
    served = serve(tmp_path, prompts, max_tokens=8, **SERVE.get(name, {}))
    assert served.model_class.startswith("modelgen.generated.vllm."), served.model_class
    misses = {len(p): teacher_forced_misses(hf, p, t) for p, t in zip(prompts, served.tokens)}
    assert not any(misses.values()), misses
    if name == "llama4_chunked":  # negative control: the same weights with one chunk past the context choose others
        off = make_tiny_checkpoint(tmp_path / "unchunked", arch, **SCALE, **dict(overrides, attention_chunk_size=4096))
        assert any(teacher_forced_misses(off, p, t) for p, t in zip(prompts, served.tokens))
    assert all(len(t) == 8 for t in served.tokens)


def test_llama4_moe_top_k_above_1_is_refused_by_name(tmp_path):
    """vLLM weights the expert input for top-k 1 only: top-k 2 is refused naming num_experts_per_tok, never served
    with the weight moved to the output."""
    make_tiny_checkpoint(tmp_path, "Llama4ForCausalLM", **SCALE, **dict(LLAMA4_MOE, num_experts_per_tok=2))
    with pytest.raises(Exception, match="num_experts_per_tok"):
        serve(tmp_path, PROMPTS[:1], max_tokens=2)
