"""MiniMax (specs/minimax.yaml: the lightning_attention kind, residual_scale) vs transformers' MiniMaxForCausalLM on
tiny random checkpoints.

Cases cover what MiniMaxConfig (and the released checkpoints' config.json) can switch: lightning and softmax layers
mixed by layer_types (transformers' alternation, and a 3:1 schedule), by the original checkpoints' attn_type_list and
``layernorm_*_alpha/beta`` spellings, every alpha / beta factor away from 1, a sliding window below the prompt, prefill
blocks shorter than the prompt (several chained blocks) and longer (one block), per-expert and fused expert layouts,
and partial RoPE by rotary_dim (against transformers with partial rotary patched in: its MiniMax port ignores
rotary_dim, see specs/minimax.yaml). Gates as for the other families: fp32 prefill logits within 1e-4 and 16 greedy
tokens equal to transformers' (teacher-forced full forwards), on rocm and neuron. Negative controls: the residual
factors at 1, the lightning state zeroed, full RoPE instead of rotary_dim each move the logits past the tolerance.
"""
from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch

from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.hf_config import ConfigError
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt
from tests.parity_helpers import (
    assert_neuron_buckets_compile,
    assert_tp2_matches_tp1_on,
    hf_greedy_forward,
    hf_logits,
    llm,
)

TARGETS = ["rocm", "neuron"]
PREFILL_ATOL = 1e-4
PROMPT = tiny_prompt()
SCALE = dict(initializer_range=0.1)  # logits of order 1, so each layer's contribution shows
FACTORS = dict(full_attn_alpha_factor=0.7, full_attn_beta_factor=1.3, linear_attn_alpha_factor=1.2,
               linear_attn_beta_factor=0.6, mlp_alpha_factor=0.9, mlp_beta_factor=1.4)
ORIGINAL_NAMES = {  # transformers' key -> the original MiniMax-Text-01 config.json key
    "full_attn_alpha_factor": "layernorm_full_attention_alpha", "full_attn_beta_factor": "layernorm_full_attention_beta",
    "linear_attn_alpha_factor": "layernorm_linear_attention_alpha",
    "linear_attn_beta_factor": "layernorm_linear_attention_beta",
    "mlp_alpha_factor": "layernorm_mlp_alpha", "mlp_beta_factor": "layernorm_mlp_beta",
}

CASES: dict[str, dict] = {
    # transformers' default schedule (full, linear, full, linear), window 8 < 24, blocks of 8 (three per prompt)
    "minimax": dict(**FACTORS),
    # 3 lightning layers then 1 softmax (the released models' 7:1 pattern, shortened), no window, one block
    "minimax_hybrid": dict(layer_types=["linear_attention"] * 3 + ["full_attention"], sliding_window=None,
                           block_size=256, **FACTORS),
    # partial RoPE of the released checkpoints: rotary_dim 8 of head_dim 16
    "minimax_rotary": dict(rotary_dim=8, sliding_window=None, **FACTORS),
}


def _partial_rotary_reference(monkeypatch, hf, rotary_dim: int):
    """A copy of transformers' MiniMax with partial RoPE as the released checkpoints' own code applies it: the first
    ``rotary_dim`` dims of each head rotated (rotate_half within them) at frequencies of that width, the rest as is."""
    from transformers.models.minimax import modeling_minimax as hf_mod

    full = hf_mod.apply_rotary_pos_emb

    def partial(q, k, cos, sin, unsqueeze_dim=1):
        rd = cos.shape[-1]
        q_rot, k_rot = full(q[..., :rd], k[..., :rd], cos, sin, unsqueeze_dim)
        return torch.cat([q_rot, q[..., rd:]], -1), torch.cat([k_rot, k[..., rd:]], -1)

    monkeypatch.setattr(hf_mod, "apply_rotary_pos_emb", partial)
    hf = copy.deepcopy(hf)
    emb = hf.model.rotary_emb
    theta = hf.config.rope_parameters["rope_theta"]
    emb.inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))
    return hf


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    cache: dict = {}

    def get(name: str, fused: bool = False):
        if (name, fused) not in cache:
            d = tmp_path_factory.mktemp(name)
            cache[name, fused] = (d, make_tiny_checkpoint(d, "MiniMaxForCausalLM", fused_experts=fused, **SCALE,
                                                         **CASES[name]))
        return cache[name, fused]

    return get


def _check(model, hf, label: str) -> None:
    err = (model.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < PREFILL_ATOL, f"{label}: prefill logits differ by {err}"
    out = model.generate_ids([PROMPT], SamplingParams(max_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy_forward(hf, PROMPT, 16), f"{label}: greedy tokens differ"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["minimax", "minimax_hybrid"])
def test_against_hf_minimax_fp32(checkpoint, name, target):
    path, hf = checkpoint(name)
    kinds = [type(layer.self_attn).__name__ for layer in hf.model.layers]
    assert "MiniMaxLightningAttention" in kinds and "MiniMaxAttention" in kinds  # both layer kinds exercised
    _check(llm(path, target, strict_config=True), hf, f"{name}/{target}")


@pytest.mark.parametrize("target", TARGETS)
def test_against_hf_fused_experts(checkpoint, target):
    path, hf = checkpoint("minimax", fused=True)
    _check(llm(path, target, strict_config=True), hf, f"fused/{target}")


@pytest.mark.parametrize("target", TARGETS)
def test_rotary_dim_is_partial_rope(checkpoint, monkeypatch, target):
    path, hf = checkpoint("minimax_rotary")
    ours = llm(path, target, strict_config=True)
    _check(ours, _partial_rotary_reference(monkeypatch, hf, 8), f"rotary_dim/{target}")


@pytest.mark.parametrize("target", TARGETS)
def test_original_config_spellings(checkpoint, tmp_path, target):
    """A config.json in the released checkpoints' spelling (attn_type_list, layernorm_*_alpha/beta, no layer_types)
    reads as transformers' names: the same logits."""
    src, hf = checkpoint("minimax_hybrid")
    for f in src.iterdir():
        shutil.copy(f, tmp_path / f.name)
    config = json.loads((src / "config.json").read_text())
    config["attn_type_list"] = [0 if t == "linear_attention" else 1 for t in config.pop("layer_types")]
    for new, old in ORIGINAL_NAMES.items():
        config[old] = config.pop(new)
    (tmp_path / "config.json").write_text(json.dumps(config))
    _check(llm(tmp_path, target, strict_config=True), hf, f"original names/{target}")


# ------------------------------------------------------------------------------------------------ negative controls
def _moved(model, ref: torch.Tensor) -> float:
    return (model.score(PROMPT).float() - ref).abs().max().item()


def test_each_feature_moves_the_logits(checkpoint):
    """Switching a feature off in our model moves the logits far past the tolerance: the residual factors (each of
    the three joins back at 1), the lightning state (decay to zero: no memory of earlier tokens)."""
    path, hf = checkpoint("minimax")
    ref = hf_logits(hf, PROMPT)
    model = llm(path, "rocm")
    assert _moved(model, ref) < PREFILL_ATOL
    layers = model.model.model.layers
    for attr, which in (("attention_scale", "full"), ("attention_scale", "linear"), ("mlp_scale", None)):
        saved = [getattr(layer, attr) for layer in layers]
        for layer in layers:
            if which is None or (type(layer.self_attn).__name__ == "MiniMaxLightningAttention") == (which == "linear"):
                setattr(layer, attr, (1.0, 1.0))
        assert _moved(model, ref) > 1e-2, (attr, which)
        for layer, value in zip(layers, saved):
            setattr(layer, attr, value)
    assert _moved(model, ref) < PREFILL_ATOL
    for layer in layers:
        if hasattr(layer.self_attn, "slope"):
            layer.self_attn.slope.fill_(1e4)  # exp(-slope) = 0: every token forgets the ones before it
    assert _moved(model, ref) > 1e-2


def test_full_rope_is_not_rotary_dim(checkpoint, monkeypatch):
    """The rotary_dim checkpoint against transformers as it stands (every dim rotated) differs: the case tests the
    partial rotation, not a no-op."""
    path, hf = checkpoint("minimax_rotary")
    model = llm(path, "rocm")
    assert _moved(model, hf_logits(hf, PROMPT)) > 1e-2


# ------------------------------------------------------------------------------- per-request state in the engine
@pytest.mark.parametrize("target", TARGETS)
def test_interleaved_requests_each_get_their_solo_tokens(checkpoint, target):
    """Different lengths in one continuous batch (short ones decode beside longer prefills): no state leaks."""
    path, _ = checkpoint("minimax_hybrid")
    prompts = [PROMPT, PROMPT[:5], PROMPT[7:20], [3]]
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    together = llm(path, target, max_num_seqs=4).generate_ids(prompts, params)
    alone = [llm(path, target).generate_ids([p], params)[0] for p in prompts]
    assert together == alone


def test_preempted_and_reused_slots_start_fresh(checkpoint):
    """A KV cache too small for both requests forces preemption; the victim restarts from a zeroed state, and later
    requests reuse slots that earlier ones left dirty."""
    path, _ = checkpoint("minimax")
    prompts = [PROMPT, PROMPT[4:], PROMPT[:9]]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    want = [llm(path, "rocm").generate_ids([p], params)[0] for p in prompts]
    tight = llm(path, "rocm", block_size=8, num_blocks=7, max_num_seqs=2)
    assert tight.generate_ids(prompts, params) == want
    assert tight.stats.preemptions > 0
    assert tight.state_pool.num_free == tight.state_pool.num_slots  # every slot returned


@pytest.mark.parametrize("target", TARGETS)
def test_chunked_prefill_equals_one_shot(checkpoint, target):
    path, _ = checkpoint("minimax")
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    want = llm(path, target).generate_ids([PROMPT], params)[0]
    extra = {"prefill_buckets": [8, 256]} if target == "neuron" else {}
    assert llm(path, target, max_num_batched_tokens=8, **extra).generate_ids([PROMPT], params)[0] == want


def test_decode_steps_equal_prefill_of_the_same_tokens(checkpoint):
    """Logits of each decode step (the recurrent update) == the teacher-forced blockwise prefill over the same
    tokens."""
    path, _ = checkpoint("minimax_hybrid")
    model = llm(path, "rocm")
    out = model.generate_ids([PROMPT], SamplingParams(max_tokens=8, ignore_eos=True))[0]
    assert model.score(PROMPT + out)[len(PROMPT) - 1:-1].argmax(-1).tolist() == out


@pytest.mark.parametrize("target", TARGETS)
def test_odd_rotary_dim_is_refused_with_the_spec_message(tmp_path, target):
    make_tiny_checkpoint(tmp_path, "MiniMaxForCausalLM", rotary_dim=7)
    with pytest.raises(ConfigError, match=r"specs/minimax\.yaml: rotary_dim must be an even number"):
        llm(tmp_path, target)


def test_new_picks_minimax_for_a_minimax_config():
    """`modelgen new` reads a MiniMax config as lightning attention (its linear_attention layer types come with a
    block_size, not Gated DeltaNet's linear_* sizes) and drafts from specs/minimax.yaml."""
    from transformers import MiniMaxConfig

    from modelgen.cli.draft import score_candidates
    from modelgen.codegen.spec_file import REPO_ROOT

    config = MiniMaxConfig(num_hidden_layers=4).to_dict()
    best = score_candidates(config, sorted((REPO_ROOT / "specs").glob("*.yaml")))[0]
    assert best.spec.stem == "minimax" and not best.differs, best.reasons


# ------------------------------------------------------------------------------------ parallelism and compilation
@pytest.mark.slow
def test_tensor_parallel_2_equals_1(checkpoint, tmp_path):
    """Two gloo ranks split the heads (lightning qkv / output_gate / out_proj, the norm's variance all-reduced; GQA;
    experts): same logits and tokens."""
    path, _ = checkpoint("minimax")
    assert_tp2_matches_tp1_on(path, TARGETS, PROMPT, tmp_path)  # rocm and neuron in one spawn


@pytest.mark.slow
def test_neuron_buckets_trace_fullgraph_and_never_recompile(checkpoint):
    """The shape-static lightning op compiles in one graph per bucket (no host read, no data-dependent shape)."""
    assert_neuron_buckets_compile(checkpoint("minimax")[0], PROMPT)
