"""Tiny random HF DeepSeek-V3 checkpoints (imported as tests.deepseek_fixtures).

Every case has a dense first layer (``first_k_dense_replace``) before MoE layers with sigmoid grouped top-k routing,
a correction bias and shared experts. Cases vary what MLA reads from the config: the low-rank query
(``q_lora_rank`` set or null), RoPE layout (``rope_interleave``), YaRN with ``mscale``/``mscale_all_dim`` (which also
scales the softmax) and biased projections.
"""
from __future__ import annotations

import torch

from tests.parity_helpers import hf_logits  # noqa: F401 -- re-exported for the parity tests

BASE = dict(vocab_size=160, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, q_lora_rank=48, qk_nope_head_dim=16,
            qk_rope_head_dim=8, v_head_dim=12, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
            n_group=2, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
            max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
            tie_word_embeddings=False, rope_interleave=True)
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 128,
        "mscale": 0.707, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}

CASES = {
    "v3": dict(BASE),
    "v3_no_q_lora": dict(BASE, q_lora_rank=None),
    "v3_rotate_half": dict(BASE, rope_interleave=False, attention_bias=True),
    "v3_yarn": dict(BASE, rope_parameters=YARN),
}
# DeepSeek-V2: softmax greedy routing, no correction bias, no rope_interleave field (always interleaved).
_V2 = {k: v for k, v in BASE.items() if k not in ("rope_interleave", "n_group", "topk_group", "norm_topk_prob")}
V2_CASES = {
    "v2": dict(_V2, topk_method="greedy", routed_scaling_factor=1.5),
    "v2_lite_yarn": dict(_V2, topk_method="greedy", q_lora_rank=None, first_k_dense_replace=0, rope_parameters=YARN),
}
# DeepSeek-V3.2 (DSA): index_topk at least the test prompts' length (dense regime) or below it (sparse).
_V32 = dict({k: v for k, v in BASE.items() if k != "rope_interleave"}, index_n_heads=8, index_head_dim=16)
V32_CASES = {
    "v32_dense": dict(_V32, index_topk=128),
    "v32_sparse": dict(_V32, index_topk=16, rope_parameters=YARN),
}
# GLM-5: the V3.2 layout with an interleaved-RoPE indexer and dense/MoE layers listed by mlp_layer_types.
GLM5_CASES = {
    "glm5_dense": dict(_V32, index_topk=128),
    "glm5_sparse": dict(_V32, index_topk=16, mlp_layer_types=["sparse", "dense", "sparse"], attention_bias=True),
}
VERSIONS = {**{n: "DeepseekV3" for n in CASES}, **{n: "DeepseekV2" for n in V2_CASES},
            **{n: "DeepseekV32" for n in V32_CASES}, **{n: "GlmMoeDsa" for n in GLM5_CASES}}


def make_deepseek(path, name: str, fused: bool = False, seed: int = 0, **overrides):
    """Save a tiny random DeepseekV3ForCausalLM, DeepseekV2ForCausalLM (V2_CASES), DeepseekV32ForCausalLM
    (V32_CASES) or GlmMoeDsaForCausalLM (GLM5_CASES) (``fused``: transformers v5 fused expert tensors); returns the fp32
    HF model."""
    import transformers

    torch.manual_seed(seed)
    version = VERSIONS[name]
    kwargs = {**CASES, **V2_CASES, **V32_CASES, **GLM5_CASES}[name]
    config = getattr(transformers, f"{version}Config")(**{**kwargs, **overrides})
    model = getattr(transformers, f"{version}ForCausalLM")(config).eval()
    with torch.no_grad():  # HF zero-initialises these; random values make a dropped or misplaced one visible
        for n, t in list(model.named_parameters()) + list(model.named_buffers()):
            if n.endswith(".bias") or "e_score_correction_bias" in n:
                t.normal_(0, 0.1)
            elif "norm" in n and n.endswith(".weight"):
                t.normal_(1.0, 0.2)
    model.save_pretrained(path, save_original_format=not fused)
    return model
