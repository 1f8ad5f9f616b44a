"""Tiny random HF Llama checkpoints for parity tests (imported by tests as tests.llama_fixtures)."""
from __future__ import annotations

import torch

# name -> LlamaConfig kwargs. Each exercises one feature the spec declares.
LLAMA_CONFIGS = {
    "gqa": dict(num_attention_heads=4, num_key_value_heads=2),
    "mha": dict(num_attention_heads=4, num_key_value_heads=4),
    "mqa": dict(num_attention_heads=4, num_key_value_heads=1),
    "tied": dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
    "llama3_rope": dict(
        num_attention_heads=4, num_key_value_heads=2,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    ),
    "bias": dict(num_attention_heads=4, num_key_value_heads=2, attention_bias=True, mlp_bias=True),
    "head_dim": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32),  # 4 * 32 != hidden 64
}


def make_llama(path, name: str, seed: int = 0, **overrides):
    """Save a tiny random LlamaForCausalLM to ``path``; returns the fp32 HF model (eval mode)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    kwargs = dict(
        vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=2, max_position_embeddings=256,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
    )
    kwargs.update(LLAMA_CONFIGS.get(name, {}))
    kwargs.update(overrides)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**kwargs)).eval()
    with torch.no_grad():  # random biases (HF zero-initialises them) so a dropped bias would show
        for n, p in model.named_parameters():
            if n.endswith(".bias"):
                p.normal_(0, 0.1)
    model.save_pretrained(path)
    return model
