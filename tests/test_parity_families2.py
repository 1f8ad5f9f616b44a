"""Onboarding round 2 (issue 26): Cohere, OLMoE, Granite-MoE, SmolLM3, EXAONE 4, ERNIE 4.5, GLM-4, the text models
of Qwen2-VL / Qwen3-VL, and StarCoder2 / Phi-2 (the ungated MLP; Phi-2's parallel block and LM-head bias)
(specs/{cohere,olmoe,granitemoe,smollm3,exaone4,ernie4_5,glm4,qwen2_vl,qwen3_vl,starcoder2,phi}.yaml) vs
transformers.

Each case is a tiny random checkpoint (runtime/testing/tiny_models.py: GQA, 4 layers, norm weights and biases
perturbed off their initial constants) with every option the family's config can switch on set in at least one case,
beyond `modelgen verify`'s defaults: biases (Cohere attention_bias, ERNIE use_bias, SmolLM3 attention/mlp_bias,
Qwen3-VL attention_bias), sliding windows shorter than the 24-token prompt (SmolLM3, EXAONE 4, Qwen2-VL), NoPE layers
by an explicit schedule (SmolLM3 no_rope_layers, EXAONE 4's global layers), OLMoE's clip_qkv (0.3, binding on the
normed q/k) with norm_topk_prob, logit scales and multipliers far from 1 (Cohere logit_scale, Granite-MoE's four),
partial rotary factors other than the default (GLM-4), both checkpoint layouts of the MoE families, transformers 4's
`rope_scaling: {type: mrope}` (Qwen2-VL) and tied embeddings. Gates as for the other families: fp32 prefill logits
within 1e-4 and 16 greedy tokens equal to transformers' (teacher-forced forwards: the VL wrappers' generate() builds
3-D positions of its own); bf16 three-way for one case per family. ``test_each_feature_moves_the_logits`` is the
negative control: each feature switched off in modelgen's model (or in the reference) moves the logits far past the
tolerance, so none is a no-op on these fixtures.
"""
from __future__ import annotations

import copy
import json

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.layers.mlp import Activation
from modelgen.runtime.testing import assert_close_three_way
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt
from tests.parity_helpers import hf_greedy_forward, hf_logits
from tests.test_parity_llama import THREE_WAY_ATOL, THREE_WAY_FACTOR

TARGETS = ["rocm", "neuron"]
PREFILL_ATOL = 1e-4
PROMPT = tiny_prompt()  # 24 tokens: longer than every window below
WINDOW = 6
SCALE = dict(initializer_range=0.1)  # weights 5x transformers' default: logits of order 1, so each feature shows
MROPE = dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])  # sums to head_dim / 2 = 8

# name -> (architecture, config overrides, fused expert tensors)
CASES: dict[str, tuple[str, dict, bool]] = {
    "cohere": ("CohereForCausalLM", dict(logit_scale=0.3, attention_bias=True), False),
    "cohere_tied": ("CohereForCausalLM", dict(logit_scale=2.5, tie_word_embeddings=True), False),
    "olmoe_clip": ("OlmoeForCausalLM", dict(clip_qkv=0.3, norm_topk_prob=True, attention_bias=True), False),
    "olmoe_fused": ("OlmoeForCausalLM", dict(clip_qkv=0.5), True),
    "granitemoe": ("GraniteMoeForCausalLM", dict(
        embedding_multiplier=6.0, residual_multiplier=0.3, attention_multiplier=0.05, logits_scaling=4.0), False),
    "granitemoe_fused": ("GraniteMoeForCausalLM", dict(embedding_multiplier=3.0, logits_scaling=0.5), True),
    # NoPE on layers 1 and 3 (not the interval default), windows on layers 0 and 3: every rope x window pairing.
    "smollm3": ("SmolLM3ForCausalLM", dict(
        no_rope_layers=[1, 0, 1, 0], use_sliding_window=True, sliding_window=WINDOW, attention_bias=True,
        mlp_bias=True, layer_types=["sliding_attention", "full_attention", "full_attention", "sliding_attention"]),
        False),
    "smollm3_interval": ("SmolLM3ForCausalLM", dict(no_rope_layer_interval=2, tie_word_embeddings=True), False),
    "exaone4": ("Exaone4ForCausalLM", dict(
        sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention", "sliding_attention",
                                            "full_attention"]), False),
    # No window: the full-attention layers rotate too (layer_types given: HF's own default divides by zero then).
    "exaone4_no_window": ("Exaone4ForCausalLM", dict(sliding_window=None, layer_types=["full_attention"] * 4), False),
    "ernie4_5": ("Ernie4_5ForCausalLM", dict(use_bias=True, tie_word_embeddings=True), False),
    "glm4": ("Glm4ForCausalLM", dict(
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.75)), False),
    "qwen2_vl": ("Qwen2VLForConditionalGeneration", dict(
        rope_parameters=MROPE, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=2), False),
    "qwen3_vl": ("Qwen3VLForConditionalGeneration", dict(
        attention_bias=True, rope_parameters=dict(MROPE, mrope_interleaved=True)), False),
    # The ungated MLP (c_proj(gelu_tanh(c_fc(x)))) with biases everywhere, and a window on every layer.
    "starcoder2": ("Starcoder2ForCausalLM", dict(use_bias=True, sliding_window=WINDOW), False),
    "starcoder2_no_bias": ("Starcoder2ForCausalLM", dict(use_bias=False, tie_word_embeddings=False), False),
    # Phi-2: parallel attention + ungated MLP on one LayerNorm, per-head q/k LayerNorms, partial RoPE, lm_head bias.
    "phi": ("PhiForCausalLM", dict(
        qk_layernorm=True, rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.4)),
        False),
    "phi_plain": ("PhiForCausalLM", dict(tie_word_embeddings=False), False),
}
THREE_WAY = ["phi", "starcoder2", "cohere", "olmoe_clip", "granitemoe", "smollm3", "exaone4", "ernie4_5", "glm4", "qwen2_vl", "qwen3_vl"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            arch, overrides, fused = CASES[name]
            d = tmp_path_factory.mktemp(name)
            cache[name] = (d, make_tiny_checkpoint(d, arch, fused_experts=fused, **SCALE, **overrides))
        return cache[name]

    return get


def _llm(path, target: str, **kw) -> LLM:
    return LLM(path, target=target, dtype=kw.pop("dtype", "float32"), max_model_len=128, **kw)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_hf_fp32(checkpoint, name, target):
    path, hf = checkpoint(name)
    llm = _llm(path, target, strict_config=True)  # every config.json key read or declared irrelevant
    err = (llm.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < PREFILL_ATOL, f"{name}/{target}: prefill logits differ by {err}"
    out = llm.generate_ids([PROMPT], SamplingParams(max_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy_forward(hf, PROMPT, 16), f"{name}/{target}: greedy tokens differ"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", THREE_WAY)
def test_against_hf_bf16_three_way(checkpoint, name, target):
    path, hf = checkpoint(name)
    gold = hf_logits(hf, PROMPT)
    floor = hf_logits(copy.deepcopy(hf).to(torch.bfloat16), PROMPT)
    ours = _llm(path, target, dtype="bfloat16").score(PROMPT).float()
    assert_close_three_way(gold, floor, ours, factor=THREE_WAY_FACTOR, atol=THREE_WAY_ATOL, name=f"{name}/{target}")


@pytest.mark.parametrize("target", TARGETS)
def test_transformers4_mrope_config_reads_as_text_rope(checkpoint, tmp_path, target):
    """Qwen2-VL checkpoints saved by transformers 4 say ``rope_scaling: {type: mrope, mrope_section}`` (v5 rewrites it
    to rope_type default): the same model, read as the 1-D RoPE it is on text."""
    import shutil

    path, hf = checkpoint("qwen2_vl")
    v4 = tmp_path / "v4"
    shutil.copytree(path, v4)
    config = json.loads((v4 / "config.json").read_text())
    text = config["text_config"]
    rope = text.pop("rope_parameters")
    text["rope_theta"] = rope["rope_theta"]
    text["rope_scaling"] = {"type": "mrope", "mrope_section": rope["mrope_section"]}
    (v4 / "config.json").write_text(json.dumps(config))
    err = (_llm(v4, target).score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < PREFILL_ATOL


def _err_after(path, ref, edit, target: str) -> float:
    """modelgen's fp32 prefill logits after ``edit(model)``, against ``ref``: max abs difference."""
    llm = _llm(path, target)
    with torch.no_grad():
        edit(llm.model)
    return (llm.score(PROMPT).float() - ref).abs().max().item()


def _attentions(model):
    return [layer.self_attn for layer in model.model.layers]


def _hf_variant(name: str, tmp_path, **changes) -> torch.Tensor:
    """HF logits of ``CASES[name]`` (same seed, so the same weights) with ``changes`` to its config."""
    arch, overrides, fused = CASES[name]
    return hf_logits(make_tiny_checkpoint(tmp_path / f"{name}_variant", arch, **SCALE, **{**overrides, **changes}),
                     PROMPT)


@pytest.mark.parametrize("target", TARGETS)
def test_each_feature_moves_the_logits(checkpoint, tmp_path, target):
    """Parity means the features are implemented: each, switched off, moves the logits far past PREFILL_ATOL."""
    def no_window(m):
        for attn in _attentions(m):
            if target == "rocm":
                attn.attn.sliding_window = None
            elif hasattr(attn, "sliding_window"):
                attn.sliding_window = None

    path, hf = checkpoint("olmoe_clip")
    ref = hf_logits(hf, PROMPT)
    assert _err_after(path, ref, lambda m: None, target) < PREFILL_ATOL
    assert _err_after(path, ref, lambda m: [setattr(a, "clip_qkv", None) for a in _attentions(m)], target) > 1e-2
    path, hf = checkpoint("cohere")
    ref = hf_logits(hf, PROMPT)
    assert _err_after(path, ref, lambda m: setattr(m, "logits_divisor", 1.0), target) > 1e-2
    path, hf = checkpoint("granitemoe")
    ref = hf_logits(hf, PROMPT)
    assert _err_after(path, ref, lambda m: setattr(m.model, "embedding_multiplier", 1.0), target) > 1e-2
    # The ungated MLP: its up_proj bias and its activation each matter (relu2 for gelu_tanh).
    path, hf = checkpoint("starcoder2")
    ref = hf_logits(hf, PROMPT)
    mlps = lambda m: [layer.mlp for layer in m.model.layers]  # noqa: E731
    assert _err_after(path, ref, lambda m: [(x.up_proj_bias if target == "neuron" else x.up_proj.bias).zero_()
                                            for x in mlps(m)], target) > 1e-2
    assert _err_after(path, ref, lambda m: [setattr(x, "act_fn", Activation("relu2")) for x in mlps(m)], target) > 1e-2
    path, hf = checkpoint("phi")
    ref = hf_logits(hf, PROMPT)
    head_bias = "lm_head_bias" if target == "neuron" else None
    assert _err_after(path, ref, lambda m: (getattr(m, head_bias) if head_bias else m.lm_head.bias).zero_(),
                      target) > 1e-2
    for name in ("smollm3", "exaone4", "qwen2_vl", "starcoder2"):
        path, hf = checkpoint(name)
        assert _err_after(path, hf_logits(hf, PROMPT), no_window, target) > 1e-2, name
    # NoPE: the same weights with RoPE on every layer are another model (HF's own switch).
    path, _ = checkpoint("smollm3")
    all_rope = _hf_variant("smollm3", tmp_path, no_rope_layers=[1, 1, 1, 1])
    assert (_llm(path, target).score(PROMPT).float() - all_rope).abs().max().item() > 1e-2
    # EXAONE 4's global layers rotate when the attention has no window (Exaone4Attention's own test): HF with that
    # switch flipped on the full layers only (their mask is full either way).
    path, hf = checkpoint("exaone4")
    rotating = copy.deepcopy(hf)
    for layer in rotating.model.layers:
        if not layer.self_attn.is_sliding:
            layer.self_attn.sliding_window = None
    assert (_llm(path, target).score(PROMPT).float() - hf_logits(rotating, PROMPT)).abs().max().item() > 1e-2


def test_clip_qkv_after_the_qk_norm(checkpoint, tmp_path):
    """The silent-wrong case of issue 26: clamping the projections before OLMoE's q_norm/k_norm (what modelgen did)
    is another model. HF's attention rewired to that order (clamp the q/k/v projections, then norm q and k, no clamp
    after) gives logits far from HF's own, and modelgen equals HF's own on every target."""
    path, hf = checkpoint("olmoe_clip")
    ref = hf_logits(hf, PROMPT)
    clip = hf.config.clip_qkv
    swapped = copy.deepcopy(hf)
    swapped.config.clip_qkv = None  # the attentions read the clip from the (copied, shared) config
    for layer in swapped.model.layers:
        attn = layer.self_attn
        attn.q_norm = torch.nn.Sequential(_Clamp(clip), attn.q_norm)
        attn.k_norm = torch.nn.Sequential(_Clamp(clip), attn.k_norm)
        attn.v_proj = torch.nn.Sequential(attn.v_proj, _Clamp(clip))
    before = hf_logits(swapped, PROMPT)
    assert (before - ref).abs().max().item() > 1e-2  # the order matters on this fixture
    for target in ("rocm", "neuron"):
        assert (_llm(path, target).score(PROMPT).float() - ref).abs().max().item() < PREFILL_ATOL


class _Clamp(torch.nn.Module):
    def __init__(self, c: float):
        super().__init__()
        self.c = c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp(-self.c, self.c)
