"""Tiny random GPT-OSS checkpoints (imported as tests.gpt_oss_fixtures): sliding window 8 on layers 0 and 2 (GptOssConfig's
default schedule), full attention on layer 1, 4 experts top-2, YaRN RoPE as in the released config."""
from __future__ import annotations

import torch

BASE = dict(vocab_size=160, hidden_size=64, intermediate_size=24, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=131072, sliding_window=8, num_local_experts=4,
            num_experts_per_tok=2, initializer_range=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            # the released gpt-oss RoPE: YaRN x32 over 4096 positions, no truncation
            rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0,
                                 truncate=False, original_max_position_embeddings=4096))

# name -> config overrides. "clamped": swiglu_limit 0.5 is below the fixtures' gate/up magnitudes (~1), so both clamps
# bind on many elements; "schedule": a layer_types list other than the default alternation, window 5.
CASES = {
    "default": {},
    "clamped": dict(swiglu_limit=0.5, seed=1),
    "schedule": dict(num_hidden_layers=4, sliding_window=5, seed=2,
                     layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"]),
}

# A prompt five windows long, so sliding layers drop most of it during prefill and every decode step.
PROMPT = [int(t) for t in torch.randint(3, 160, (40,), generator=torch.Generator().manual_seed(7))]


def make_gpt_oss(path, seed: int = 0, **overrides):
    """Save a tiny random GptOssForCausalLM (fused expert tensors, as transformers writes GPT-OSS) and return it (fp32).

    Biases and sinks are drawn at a visible scale (HF zero-initialises the expert biases and draws sinks at 0.1 std):
    a dropped bias or a sink left out of the denominator then moves the logits far past the tolerances."""
    import transformers

    torch.manual_seed(seed)
    config = transformers.GptOssConfig(**{**BASE, **overrides})
    model = transformers.GptOssForCausalLM(config).eval()
    with torch.no_grad():
        for n, t in model.named_parameters():
            if n.endswith("bias"):
                t.normal_(0, 0.1)
            elif n.endswith("sinks"):
                t.normal_(0, 1.0)
    model.save_pretrained(path)
    return model
