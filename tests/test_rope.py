"""RoPE variants: our cos/sin tables equal transformers' LlamaRotaryEmbedding for every rope_type, both v4
(rope_scaling + rope_theta) and v5 (rope_parameters) config spellings, and both rotation layouts are consistent."""
from __future__ import annotations

import pytest
import torch

from modelgen.generated.rocm.llama.config import LlamaConfig as GenConfig
from modelgen.runtime.ops.rope import apply_rope, cos_sin_cache

SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1},
}


@pytest.mark.parametrize("kind", list(SCALINGS))
def test_cos_sin_match_transformers(kind):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    params = {"rope_theta": 10000.0, "rope_type": "default"} | (SCALINGS[kind] or {})
    hf_cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=128, rope_parameters=params)
    cfg = GenConfig.from_hf_config(hf_cfg.to_dict())
    assert (cfg.rope_scaling is None) == (kind == "default")
    assert kind == "default" or cfg.rope_scaling["rope_type"] == kind
    hf_rope = LlamaRotaryEmbedding(hf_cfg)
    pos = torch.arange(100)[None]
    cos, sin = hf_rope(torch.zeros(1, 100, 16), pos)
    table = cos_sin_cache(16, cfg.rope_theta, cfg.rope_scaling, cfg.max_position_embeddings)
    ours_cos, ours_sin = table[:100].chunk(2, dim=-1)
    torch.testing.assert_close(torch.cat([ours_cos, ours_cos], -1), cos[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(torch.cat([ours_sin, ours_sin], -1), sin[0], atol=1e-6, rtol=1e-5)


def test_v4_spelling_rope_scaling_and_rope_theta():
    cfg = GenConfig.from_hf_config({
        "vocab_size": 10, "hidden_size": 64, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 4,
        "rope_theta": 500000.0, "rope_scaling": {"type": "linear", "factor": 2.0},
    })
    assert cfg.rope_theta == 500000.0 and cfg.rope_scaling == {"factor": 2.0, "rope_type": "linear"}


def test_pairwise_equals_rotate_half_after_permutation():
    """The two layouts rotate the same pairs once the head dims are permuted (what llama.cpp's q/k permutation does)."""
    torch.manual_seed(0)
    x = torch.randn(5, 2, 8)
    table = cos_sin_cache(8, 10000.0, None, 32)
    pos = torch.tensor([0, 3, 7, 1, 30])
    perm = torch.cat([torch.arange(0, 8, 2), torch.arange(1, 8, 2)])  # pairwise order -> rotate_half order
    a = apply_rope(x, table, pos, 8, "pairwise")
    b = apply_rope(x[..., perm], table, pos, 8, "rotate_half")
    torch.testing.assert_close(a[..., perm], b)


def test_partial_rotary_leaves_tail_untouched():
    x = torch.randn(3, 1, 8)
    out = apply_rope(x, cos_sin_cache(4, 10000.0, None, 16), torch.tensor([1, 2, 3]), 4, "rotate_half")
    assert torch.equal(out[..., 4:], x[..., 4:]) and not torch.equal(out[..., :4], x[..., :4])
