"""Tiny random HF checkpoints of the Gated DeltaNet hybrids (imported as tests.qwen3_next_fixtures).

Qwen3-Next (fused ``in_proj_qkvz``/``in_proj_ba``, MoE with a sigmoid-gated shared expert), Qwen3.5 dense and
Qwen3.5-MoE (split GDN projections), each as ``*ForCausalLM`` and, for Qwen3.5, as the multimodal
``*ForConditionalGeneration`` whose text weights sit under ``model.language_model.`` beside a vision tower.
Layer schedules mix ``linear_attention`` and ``full_attention`` so both kinds and their caches are exercised.
"""
from __future__ import annotations

import torch

from tests.parity_helpers import hf_logits  # noqa: F401 -- re-exported for the parity tests

TEXT = dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-6,
            linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=4, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"])
MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
           norm_topk_prob=True)

# name -> (config class, model class, config kwargs, text config kwargs for ConditionalGeneration or None)
CASES = {
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM", dict(TEXT, **MOE, decoder_sparse_step=1), None),
    # shared width == the experts' (as Qwen3-Next-80B-A3B, 512 == 512): the GPU path folds the shared expert into
    # slot E of the fused MoE (runtime/layers/moe/shared_slot.py); the 48 above keeps it a separate MLP
    "qwen3_next_shared_slot": ("Qwen3NextConfig", "Qwen3NextForCausalLM",
                               dict(TEXT, **MOE, decoder_sparse_step=1) | {"shared_expert_intermediate_size": 32},
                               None),
    "qwen3_next_dense_layer": ("Qwen3NextConfig", "Qwen3NextForCausalLM",
                               dict(TEXT, **MOE, decoder_sparse_step=1, mlp_only_layers=[2]), None),
    "qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(TEXT), None),
    "qwen3_5_moe": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", dict(TEXT, **MOE), None),
    "qwen3_5_vl": ("Qwen3_5Config", "Qwen3_5ForConditionalGeneration", None, dict(TEXT)),
    "qwen3_5_moe_vl": ("Qwen3_5MoeConfig", "Qwen3_5MoeForConditionalGeneration", None, dict(TEXT, **MOE)),
}
TINY_VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=4,
                   temporal_patch_size=1, spatial_merge_size=1)


def make_qwen3_next(path, name: str, fused: bool = False, seed: int = 0):
    """Save a tiny random model (``fused``: transformers v5 fused expert tensors); returns the fp32 HF model."""
    import transformers

    cfg_cls, model_cls, kwargs, text = CASES[name]
    cfg_type = getattr(transformers, cfg_cls)
    config = cfg_type(**kwargs) if text is None else cfg_type(text_config=text, vision_config=TINY_VISION)
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():  # HF zero-initialises these; random values make a dropped or mis-centred one visible
        for n, t in model.named_parameters():
            if n.endswith("norm.weight") or "layernorm" in n or n.endswith(".bias") or "dt_bias" in n:
                t.normal_(0, 0.2)
    model.save_pretrained(path, save_original_format=not fused)
    return model
