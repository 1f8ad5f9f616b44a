"""Falcon-H1 (specs/falcon_h1.yaml: every layer a Mamba-2 mixer and GQA attention in parallel on the same normed input,
summed, then a SwiGLU MLP, with muP multipliers everywhere) vs transformers' FalconH1ForCausalLM on tiny random
checkpoints.

Cases cover what FalconH1Config can switch: every muP multiplier away from 1 (embedding, attention in / out, key,
SSM in / out, the five-part ssm_multipliers, the MLP's gate / down, the LM head), the mixer's gated RMSNorm off
(FalconH1Config's default), on before the gate (its default order) and on after the gate, in_proj's bias
(mamba_proj_bias) and out_proj's (projectors_bias) each on alone, attention and MLP biases, one and two B / C
groups, conv kernels 4 and 3 with and without a bias, a time_step_limit that clamps dt, mamba_d_ssm given or derived
from mamba_expand, an attention head_dim other than hidden_size / heads, tied and untied embeddings, and a
config.json carrying mamba_use_mlp (both values: transformers never reads it). Gates as for the other families: fp32
prefill logits within 1e-4 and 16 greedy tokens equal to transformers' (teacher-forced full forwards), on rocm and
neuron, with every config.json key read or declared irrelevant (strict). Negative controls: each multiplier set back
to 1, and the norm moved to the other side of the gate, move the logits.
"""
from __future__ import annotations

import json

import pytest

from modelgen.runtime.hf_config import ConfigError
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt
from tests.parity_helpers import (
    assert_chunked_prefill_equals_one_shot,
    assert_interleaved_equal_solo,
    assert_matches_hf,
    assert_neuron_buckets_compile,
    assert_preemption_restarts_fresh,
    assert_tp2_matches_tp1,
    checkpoint_cache,
    hf_logits,
    llm,
)

TARGETS = ["rocm", "neuron"]
PREFILL_ATOL = 1e-4
PROMPT = tiny_prompt()
SCALE = dict(initializer_range=0.1)  # logits of order 1, so every layer's contribution shows
MUP = dict(embedding_multiplier=1.7, lm_head_multiplier=0.6, attention_in_multiplier=0.8, attention_out_multiplier=1.3,
           key_multiplier=1.5, ssm_in_multiplier=1.2, ssm_out_multiplier=0.7,
           ssm_multipliers=[0.9, 1.1, 1.2, 0.8, 1.3], mlp_multipliers=[1.2, 0.75])

CASES: dict[str, dict] = {
    # FalconH1Config's defaults at tiny sizes: multipliers 1, no gated norm, 2 groups, chunks of 8, conv bias
    "falcon_h1": dict(),
    # every multiplier off 1, the gated norm before the gate (the default order), every bias, tied embeddings
    "falcon_h1_mup": dict(**MUP, mamba_rms_norm=True, mamba_norm_before_gate=True, mamba_proj_bias=True,
                          projectors_bias=True, attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
    # the norm after the gate (Mamba-2's order), one group, kernel 3 without bias, clamped dt, chunks of 5, the width
    # from mamba_expand (mamba_d_ssm null), out_proj's bias alone; an attention head_dim (24) other than hidden /
    # heads, as Falcon-H1 checkpoints write it (FalconH1Attention reads getattr(config, "head_dim"))
    "falcon_h1_gate_first": dict(**MUP, head_dim=24, mamba_rms_norm=True, mamba_norm_before_gate=False,
                                 mamba_n_groups=1, mamba_d_conv=3, mamba_conv_bias=False, time_step_limit=(0.05, 0.3),
                                 mamba_chunk_size=5, mamba_d_ssm=None, projectors_bias=True),
    # in_proj's bias alone, no gated norm with norm_before_gate false (it then changes nothing), a single chunk
    "falcon_h1_in_bias": dict(mamba_proj_bias=True, mamba_norm_before_gate=False, mamba_chunk_size=64,
                              key_multiplier=0.5, ssm_multipliers=[1.5, 0.5, 1.0, 1.0, 2.0]),
}
# config.json keys transformers 5.25 does not read, written the way Falcon-H1 checkpoints carry them
EXTRA_KEYS = {"falcon_h1": {"mamba_use_mlp": True}, "falcon_h1_mup": {"mamba_use_mlp": False}}


def _make(d, name, _):
    hf = make_tiny_checkpoint(d, "FalconH1ForCausalLM", **SCALE, **CASES[name])
    if name in EXTRA_KEYS:
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, **EXTRA_KEYS[name]}))
    return hf


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return checkpoint_cache(tmp_path_factory, _make)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_hf_falcon_h1_fp32(checkpoint, name, target):
    assert_matches_hf(*checkpoint(name), target, PROMPT, name)


def test_every_layer_runs_both_mixers(checkpoint):
    """The block: self_attn and mamba in every layer, each with its own cache (a paged KV cache and a state slot)."""
    path, _ = checkpoint("falcon_h1_mup")
    model = llm(path, "rocm")
    layers = model.model.model.layers
    assert all(hasattr(layer, "self_attn") and hasattr(layer, "mamba") for layer in layers)
    names = [spec.name for spec in model.model.get_kv_spec().layers]
    assert names == [f"layers.{i}.{m}" for i in range(len(layers)) for m in ("self_attn", "mamba")]


def _set(obj, attr, value):
    setattr(obj, attr, value)


# (what is switched back, how) on the rocm model of falcon_h1_mup: each must move the logits
CONTROLS = {
    "embedding_multiplier": lambda m: _set(m.model, "embedding_multiplier", 1.0),
    "lm_head_multiplier": lambda m: _set(m, "logits_divisor", 1.0),
    "attention_in_multiplier": lambda m: [_set(x, "attention_factors", (1.0, x.attention_factors[1]))
                                          for x in m.model.layers],
    "attention_out_multiplier": lambda m: [_set(x, "attention_factors", (x.attention_factors[0], 1.0))
                                           for x in m.model.layers],
    "ssm_in_multiplier": lambda m: [_set(x, "parallel_mixer_factors", (1.0, x.parallel_mixer_factors[1]))
                                    for x in m.model.layers],
    "ssm_out_multiplier": lambda m: [_set(x, "parallel_mixer_factors", (x.parallel_mixer_factors[0], 1.0))
                                     for x in m.model.layers],
    "key_multiplier": lambda m: [_set(x.self_attn.attn, "scale", x.self_attn.head_dim ** -0.5)
                                 for x in m.model.layers],
    "ssm_multipliers": lambda m: [_set(x.mamba, "in_scale", None) for x in m.model.layers],
    "mlp_multipliers[0]": lambda m: [_set(x.feed_forward, "gate_multiplier", 1.0) for x in m.model.layers],
    "mlp_multipliers[1]": lambda m: [_set(x, "mlp_scale", (1, 1)) for x in m.model.layers],
    "mamba_norm_before_gate": lambda m: [_set(x.mamba, "norm_before_gate", False) for x in m.model.layers],
}


@pytest.mark.parametrize("control", list(CONTROLS))
def test_each_multiplier_matters(checkpoint, control):
    """Negative controls: switching one multiplier back to 1 (or the norm to after the gate) moves the logits, so
    none of them is a no-op on this fixture and the parity above would catch one applied wrongly or not at all."""
    path, hf = checkpoint("falcon_h1_mup")
    model = llm(path, "rocm")
    ref = hf_logits(hf, PROMPT)
    assert (model.score(PROMPT).float() - ref).abs().max().item() < PREFILL_ATOL
    CONTROLS[control](model.model)
    assert (model.score(PROMPT).float() - ref).abs().max().item() > 1e-3, control


@pytest.mark.parametrize("target", TARGETS)
def test_interleaved_requests_each_get_their_solo_tokens(checkpoint, target):
    assert_interleaved_equal_solo(checkpoint("falcon_h1_mup")[0], target, [PROMPT, PROMPT[:5], PROMPT[7:20], [3]])


def test_preempted_and_reused_slots_start_fresh(checkpoint):
    assert_preemption_restarts_fresh(checkpoint("falcon_h1_mup")[0], [PROMPT, PROMPT[4:], PROMPT[:9]])


@pytest.mark.parametrize("target", TARGETS)
def test_chunked_prefill_equals_one_shot(checkpoint, target):
    assert_chunked_prefill_equals_one_shot(checkpoint("falcon_h1_mup")[0], target, PROMPT)


# ------------------------------------------------------------------------------------ parallelism and compilation
@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_tensor_parallel_2_equals_1(checkpoint, tmp_path, target):
    """Two gloo ranks split the Mamba heads with their groups (in_proj part by part, with its mup factors), the
    attention heads and the MLP: same logits, same tokens (biases and every multiplier on)."""
    assert_tp2_matches_tp1(checkpoint("falcon_h1_mup")[0], target, PROMPT, tmp_path)


@pytest.mark.slow
def test_neuron_buckets_trace_fullgraph_and_never_recompile(checkpoint):
    """Both mixers of every layer compile in one graph per bucket."""
    assert_neuron_buckets_compile(checkpoint("falcon_h1_mup")[0], PROMPT)


# ---------------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("overrides, message", [
    (dict(mamba_d_conv=1), r"mamba_d_conv below 2"),
    (dict(hidden_act="gelu"), r"hidden_act other than silu"),
])
def test_refused_configs_name_the_spec_rule(tmp_path, target, overrides, message):
    make_tiny_checkpoint(tmp_path, "FalconH1ForCausalLM", **overrides)
    with pytest.raises(ConfigError, match=rf"config\.json: specs/falcon_h1\.yaml: {message}"):
        llm(tmp_path, target)


@pytest.mark.parametrize("key, value, message", [
    ("ssm_multipliers", [1.0, 1.0, 1.0, 1.0], r"ssm_multipliers must hold five factors"),
    ("mlp_multipliers", [1.0], r"mlp_multipliers must hold two factors"),
])
def test_refused_multiplier_lists(tmp_path, key, value, message):
    """A multiplier list of the wrong length (transformers would index past it) is refused by name."""
    make_tiny_checkpoint(tmp_path, "FalconH1ForCausalLM")
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, key: value}))
    with pytest.raises(ConfigError, match=message):
        llm(tmp_path, "rocm")


# ------------------------------------------------------------------------- the parallel_mixer vocabulary's checks
def _edited_spec(tmp_path, old: str, new: str):
    from modelgen.codegen.spec_file import REPO_ROOT

    text = (REPO_ROOT / "specs" / "falcon_h1.yaml").read_text()
    assert old in text, old
    path = tmp_path / "falcon_h1.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("old, new, message", [
    # the parallel mixer named like the attention
    ("      name: mamba\n", "      name: self_attn\n", r"'self_attn' is taken in the decoder layer"),
    # not a pre-norm layer
    ("    residual: pre_norm ", "    residual: post_norm ", r"a parallel mixer is generated in residual pre_norm"),
])
def test_malformed_parallel_mixers_are_refused(tmp_path, old, new, message):
    from modelgen.codegen.errors import SpecError
    from modelgen.codegen.lower import compile_spec

    with pytest.raises(SpecError, match=message):
        compile_spec(_edited_spec(tmp_path, old, new))


def _without_parallel_mixer(tmp_path, replacement: str = "") -> str:
    text = (_edited_spec(tmp_path, "x", "x")).read_text()
    start = text.index("    parallel_mixer:")
    end = text.index("    mixer_scale:")
    return text[:start] + replacement + text[end:]


def test_a_parallel_mixer_of_the_attentions_kind_is_refused(tmp_path):
    from modelgen.codegen.errors import SpecError
    from modelgen.codegen.lower import compile_spec

    second = ("    parallel_mixer: {name: attn2, kind: gqa, num_heads: num_attention_heads, num_kv_heads: "
              "num_key_value_heads, head_dim: head_dim, rope: {style: rotate_half, theta: rope_theta, "
              "max_position: max_position_embeddings}, kv_cache: {kind: paged_kv}}\n")
    (tmp_path / "falcon_h1.yaml").write_text(_without_parallel_mixer(tmp_path, second))
    with pytest.raises(SpecError, match=r"a parallel mixer of the attention's own kind is not generated"):
        compile_spec(tmp_path / "falcon_h1.yaml")


def test_mixer_scale_needs_a_parallel_mixer(tmp_path):
    from modelgen.codegen.errors import SpecError
    from modelgen.codegen.lower import compile_spec

    (tmp_path / "falcon_h1.yaml").write_text(_without_parallel_mixer(tmp_path))
    with pytest.raises(SpecError, match=r"mixer_scale needs a parallel_mixer"):
        compile_spec(tmp_path / "falcon_h1.yaml")


def test_the_lowered_block_reads_like_the_spec():
    """The IR the templates render: the parallel mixer is the Mamba-2 kind with Falcon-H1's options, and the factors
    are the config's multipliers."""
    from modelgen.codegen.lower import compile_spec
    from modelgen.codegen.spec_file import REPO_ROOT

    ir = compile_spec(REPO_ROOT / "specs" / "falcon_h1.yaml")
    (block,) = ir.blocks
    assert (block.attention.kind, block.parallel_mixer.kind, block.mlp.kind) == ("gqa", "mamba2", "gated")
    assert [v.spec for pair in block.mixer_scale for v in pair] == [
        "attention_in_multiplier", "attention_out_multiplier", "ssm_in_multiplier", "ssm_out_multiplier"]
    m = block.parallel_mixer
    assert (m.in_proj_scales.spec, m.out_bias.spec, m.gated_norm.spec, m.norm_before_gate.spec) == (
        "ssm_multipliers", "projectors_bias", "mamba_rms_norm", "mamba_norm_before_gate")
    assert not ir.fuse_attention_all_reduce  # the attention's output is not the layer's only mixer output
