"""GPT-NeoX / Pythia (specs/gpt_neox.yaml) against transformers' GPTNeoXForCausalLM (issue 26).

Feature-on configs beyond `modelgen verify`'s defaults: the parallel layer with each sub-layer's own LayerNorm and the
sequential one (use_parallel_residual), rotary_pct 0.25 and 1.0 with another rotary base, hidden_act gelu (exact),
gelu_fast and gelu_pytorch_tanh (tanh), attention_bias off, tied embeddings, and both spellings of the checkpoint
(transformers' original format: `embed_out`; v5's `lm_head`) and of the config (transformers 4's `rotary_pct` /
`rotary_emb_base`; 5's `rope_parameters`). Gates: fp32 prefill logits within 1e-4 and 16 greedy tokens equal to
transformers' (teacher-forced), bf16 three-way for two cases, on rocm and neuron. ``test_each_feature_moves_the_logits``
is the negative control: the per-head interleaved query_key_value read as contiguous [q | k | v] rows, the MLP's own
norm replaced by the attention's, the parallel layer run sequentially, the rotary fraction and the activation each
move the logits far past the tolerance.
"""
from __future__ import annotations

import json
import shutil

import pytest

from modelgen.runtime.layers.mlp import Activation
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint
from tests.family_parity import (
    PREFILL_ATOL, PROMPT, TARGETS, assert_bf16_three_way, assert_fp32_parity, checkpoint_getter, err_after,
)
from tests.parity_helpers import hf_logits, llm

SCALE = dict(initializer_range=0.1)
ARCH = "GPTNeoXForCausalLM"


def rope(factor: float, theta: float = 10000.0) -> dict:
    return dict(rope_type="default", rope_theta=theta, partial_rotary_factor=factor)


# name -> (config overrides, transformers v5 names on save: lm_head instead of embed_out)
CASES: dict[str, tuple[dict, bool]] = {
    "parallel": (dict(use_parallel_residual=True, hidden_act="gelu"), False),
    "sequential_full_rotary": (dict(use_parallel_residual=False, hidden_act="gelu_fast",
                                    rope_parameters=rope(1.0, theta=500.0)), True),
    "no_bias_tied": (dict(attention_bias=False, tie_word_embeddings=True, hidden_act="gelu_pytorch_tanh",
                          rope_parameters=rope(0.5)), False),
}
THREE_WAY = ["parallel", "sequential_full_rotary"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    def make(d, name: str):
        overrides, v5_names = CASES[name]
        return make_tiny_checkpoint(d, ARCH, fused_experts=v5_names, **SCALE, **overrides)

    return checkpoint_getter(tmp_path_factory, make)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_gpt_neox_fp32(checkpoint, name, target):
    path, hf = checkpoint(name)
    assert_fp32_parity(path, hf, name, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", THREE_WAY)
def test_against_gpt_neox_bf16_three_way(checkpoint, name, target):
    path, hf = checkpoint(name)
    assert_bf16_three_way(path, hf, name, target)


@pytest.mark.parametrize("target", TARGETS)
def test_transformers4_config_keys(checkpoint, tmp_path, target):
    """Pythia's released configs say ``rotary_pct`` / ``rotary_emb_base`` (no rope_parameters): the same model."""
    path, hf = checkpoint("sequential_full_rotary")
    v4 = tmp_path / "v4"
    shutil.copytree(path, v4)
    config = json.loads((v4 / "config.json").read_text())
    params = config.pop("rope_parameters")
    config.update(rotary_pct=params["partial_rotary_factor"], rotary_emb_base=params["rope_theta"])
    (v4 / "config.json").write_text(json.dumps(config))
    err = (llm(v4, target, strict_config=True, max_model_len=128).score(PROMPT).float()
           - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < PREFILL_ATOL


@pytest.mark.parametrize("target", TARGETS)
def test_each_feature_moves_the_logits(checkpoint, tmp_path, target):
    """Parity means the features are implemented: each, switched off, moves the logits far past PREFILL_ATOL."""
    path, hf = checkpoint("parallel")
    ref = hf_logits(hf, PROMPT)
    layers = lambda m: m.gpt_neox.layers  # noqa: E731
    assert err_after(path, ref, lambda m: None, target) < PREFILL_ATOL

    # query_key_value read as contiguous [all q | all k | all v] rows instead of per head [h, 3, d]
    def contiguous_qkv(m):
        for layer, hf_layer in zip(layers(m), hf.gpt_neox.layers):
            fused = hf_layer.attention.query_key_value
            if target == "rocm":
                layer.attention.qkv_proj.weight.copy_(fused.weight)
                layer.attention.qkv_proj.bias.copy_(fused.bias)
            else:
                layer.attention.qkv_proj_weight.copy_(fused.weight.T)
                layer.attention.qkv_proj_bias.copy_(fused.bias)
    assert err_after(path, ref, contiguous_qkv, target) > 1e-2

    # the parallel MLP reading the attention's norm (Phi / Cohere) instead of its own post_attention_layernorm
    def shared_norm(m):
        for layer in layers(m):
            layer.post_attention_layernorm.weight.copy_(layer.input_layernorm.weight)
            layer.post_attention_layernorm.bias.copy_(layer.input_layernorm.bias)
    assert err_after(path, ref, shared_norm, target) > 1e-2
    # the parallel layer run sequentially
    sequential = lambda m: [setattr(x, "parallel_residual", False) for x in layers(m)]  # noqa: E731
    assert err_after(path, ref, sequential, target) > 1e-2
    # exact GELU (hidden_act gelu) vs its tanh approximation: small (7.6e-4 here) but past the tolerance
    assert err_after(path, ref, lambda m: [setattr(x.mlp, "act_fn", Activation("gelu_tanh")) for x in layers(m)],
                      target) > 5 * PREFILL_ATOL
    # rotary_pct: transformers with every dim rotated is another model than ours (0.25)
    overrides, _ = CASES["parallel"]
    full = make_tiny_checkpoint(tmp_path / "full", ARCH, **SCALE, **overrides, rope_parameters=rope(1.0))
    assert (llm(path, target, max_model_len=128).score(PROMPT).float() - hf_logits(full, PROMPT)).abs().max() > 1e-2
