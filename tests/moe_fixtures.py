"""Tiny random HF checkpoints for Qwen3, Qwen3-MoE, Mixtral and GLM4-MoE (imported as tests.moe_fixtures)."""
from __future__ import annotations

import torch

BASE = dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2)

# name -> (transformers class names, config kwargs). Every MoE case has at least one dense layer except Mixtral.
CASES = {
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=32, attention_bias=True)),
    "qwen3_moe_norm": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                       dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                            mlp_only_layers=[1])),
    "qwen3_moe_nonorm": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                         dict(num_experts=8, num_experts_per_tok=3, moe_intermediate_size=32, norm_topk_prob=False,
                              decoder_sparse_step=2)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=4, num_experts_per_tok=2)),
    "glm4_moe_qknorm": ("Glm4MoeConfig", "Glm4MoeForCausalLM",
                        dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, first_k_dense_replace=1,
                             n_group=2, topk_group=1, n_shared_experts=1, use_qk_norm=True, routed_scaling_factor=2.5,
                             norm_topk_prob=True)),
    "glm4_moe_plain": ("Glm4MoeConfig", "Glm4MoeForCausalLM",
                       dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, first_k_dense_replace=2,
                            n_group=1, topk_group=1, n_shared_experts=2, use_qk_norm=False, norm_topk_prob=False)),
}


def make_moe(path, name: str, fused: bool = False, seed: int = 0, **overrides):
    """Save a tiny random model; ``fused`` writes transformers v5's fused expert tensors; ``overrides`` are extra
    config kwargs (e.g. ``initializer_range``). Returns the fp32 HF model."""
    import transformers

    cfg_cls, model_cls, extra = CASES[name]
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(getattr(transformers, cfg_cls)(**{**BASE, **extra, **overrides})).eval()
    with torch.no_grad():  # HF zero-initialises these; random values make a dropped one visible
        for n, t in list(model.named_parameters()) + list(model.named_buffers()):
            if n.endswith(".bias") or "e_score_correction_bias" in n:
                t.normal_(0, 0.1)
    model.save_pretrained(path, save_original_format=not fused)
    return model
