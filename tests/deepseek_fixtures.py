"""Tiny random HF DeepSeek-V3 checkpoints (imported as tests.deepseek_fixtures).

Every case has a dense first layer (``first_k_dense_replace``) before MoE layers with sigmoid grouped top-k routing,
a correction bias and shared experts. Cases vary what MLA reads from the config: the low-rank query
(``q_lora_rank`` set or null), RoPE layout (``rope_interleave``), YaRN with ``mscale``/``mscale_all_dim`` (which also
scales the softmax) and biased projections.
"""
from __future__ import annotations

import torch

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


def make_deepseek(path, name: str, fused: bool = False, seed: int = 0, **overrides):
    """Save a tiny random DeepseekV3ForCausalLM or (V2_CASES) DeepseekV2ForCausalLM (``fused``: transformers v5 fused expert tensors); returns the fp32
    HF model."""
    import transformers

    torch.manual_seed(seed)
    version = "V2" if name in V2_CASES else "V3"
    config = getattr(transformers, f"Deepseek{version}Config")(**{**CASES.get(name, V2_CASES.get(name)), **overrides})
    model = getattr(transformers, f"Deepseek{version}ForCausalLM")(config).eval()
    with torch.no_grad():  # HF zero-initialises these; random values make a dropped or misplaced one visible
        for n, t in list(model.named_parameters()) + list(model.named_buffers()):
            if n.endswith(".bias") or "e_score_correction_bias" in n:
                t.normal_(0, 0.1)
            elif "norm" in n and n.endswith(".weight"):
                t.normal_(1.0, 0.2)
    model.save_pretrained(path, save_original_format=not fused)
    return model


def hf_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()
