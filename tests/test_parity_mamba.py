"""Mamba (specs/mamba.yaml: the mamba kind in one-sub-layer blocks) vs transformers' MambaForCausalLM on tiny random
checkpoints.

Cases cover what MambaConfig can switch: projection biases (``use_bias``) and conv bias (``use_conv_bias``) on and
off, conv kernel 3 / 4, state size 8 / 16, an explicit ``time_step_rank`` and the "auto" one, expand 2 / 3, tied
(MambaConfig's default) and untied embeddings; the original state-spaces name ``backbone.embedding`` too. Gates as for
the other families: fp32 prefill logits within 1e-4 and 16 greedy tokens equal to transformers' (teacher-forced full
forwards), on rocm and neuron. Negative controls: the conv history and the SSM state each move the logits when
switched off.
"""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.hf_config import ConfigError
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt
from tests.parity_helpers import checkpoint_cache, hf_greedy_forward, hf_logits, llm

TARGETS = ["rocm", "neuron"]
PREFILL_ATOL = 1e-4
PROMPT = tiny_prompt()
SCALE = dict(initializer_range=0.1)

CASES: dict[str, dict] = {
    # MambaConfig's defaults at tiny sizes: conv bias, no projection biases, tied, time_step_rank "auto" (4)
    "mamba": dict(tie_word_embeddings=True),
    # projection biases, no conv bias, kernel 3, d_state 8, dt rank 6, expand 3, untied
    "mamba_biases": dict(use_bias=True, use_conv_bias=False, conv_kernel=3, state_size=8, time_step_rank=6,
                         expand=3, tie_word_embeddings=False, residual_in_fp32=False),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return checkpoint_cache(tmp_path_factory, lambda d, name, fused: make_tiny_checkpoint(
        d, "MambaForCausalLM", **SCALE, **CASES[name]))


def _logits_error(model, hf) -> float:
    return (model.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_hf_mamba_fp32(checkpoint, name, target):
    path, hf = checkpoint(name)
    assert hf.config.tie_word_embeddings == (name == "mamba")
    model = llm(path, target, strict_config=True)  # every config.json key read or declared irrelevant
    err = _logits_error(model, hf)
    assert err < PREFILL_ATOL, f"{name}/{target}: prefill logits differ by {err}"
    out = model.generate_ids([PROMPT], SamplingParams(max_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy_forward(hf, PROMPT, 16), f"{name}/{target}: greedy tokens differ"


def test_original_embedding_name_loads(checkpoint, tmp_path):
    """state-spaces checkpoints call the embedding ``backbone.embedding`` (MambaModel.load_hook renames it)."""
    path, hf = checkpoint("mamba_biases")
    tensors = load_file(str(path / "model.safetensors"))
    tensors["backbone.embedding.weight"] = tensors.pop("backbone.embeddings.weight")
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(json.loads((path / "config.json").read_text())))
    assert _logits_error(llm(tmp_path, "rocm"), hf) < PREFILL_ATOL


# ------------------------------------------------------------------------------------------ negative controls
def test_conv_history_and_ssm_state_matter(checkpoint):
    """Zeroing the conv's history taps, or the SSM's input (B projected to zero: the state never fills, y = D * x),
    moves the logits far past the tolerance."""
    path, hf = checkpoint("mamba")
    model = llm(path, "rocm")
    assert _logits_error(model, hf) < PREFILL_ATOL
    mixers = [layer.mixer for layer in model.model.backbone.layers]
    saved = [m.conv1d.weight.detach().clone() for m in mixers]
    with torch.no_grad():
        for m in mixers:
            m.conv1d.weight[..., :-1].zero_()
    assert _logits_error(model, hf) > 1e-2
    with torch.no_grad():
        for m, w in zip(mixers, saved):
            m.conv1d.weight.copy_(w)
            rank, n = m.time_step_rank, m.state_size
            m.x_proj.weight[rank:rank + n].zero_()  # the B rows of x_proj
    assert _logits_error(model, hf) > 1e-2


# ------------------------------------------------------------------------------- per-request state in the engine
@pytest.mark.parametrize("target", TARGETS)
def test_interleaved_requests_each_get_their_solo_tokens(checkpoint, target):
    path, _ = checkpoint("mamba_biases")
    prompts = [PROMPT, PROMPT[:5], PROMPT[7:20], [3]]
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    together = llm(path, target, max_num_seqs=4).generate_ids(prompts, params)
    alone = [llm(path, target).generate_ids([p], params)[0] for p in prompts]
    assert together == alone


def test_full_state_pool_preempts_and_reused_slots_start_fresh(checkpoint):
    """Two state slots for three requests: the third waits (or preempts), reusing a slot an earlier request left
    dirty, and every request still gets its solo tokens."""
    path, _ = checkpoint("mamba")
    prompts = [PROMPT, PROMPT[4:], PROMPT[:9]]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    want = [llm(path, "rocm").generate_ids([p], params)[0] for p in prompts]
    tight = llm(path, "rocm", max_num_seqs=2)
    assert tight.generate_ids(prompts, params) == want
    assert tight.state_pool.num_free == tight.state_pool.num_slots  # every slot returned


@pytest.mark.parametrize("target", TARGETS)
def test_chunked_prefill_equals_one_shot(checkpoint, target):
    path, _ = checkpoint("mamba")
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    want = llm(path, target).generate_ids([PROMPT], params)[0]
    extra = {"prefill_buckets": [8, 256]} if target == "neuron" else {}
    assert llm(path, target, max_num_batched_tokens=8, **extra).generate_ids([PROMPT], params)[0] == want


@pytest.mark.parametrize("target", TARGETS)
def test_refused_kernel_names_the_spec_rule(tmp_path, target):
    make_tiny_checkpoint(tmp_path, "MambaForCausalLM", conv_kernel=1)
    with pytest.raises(ConfigError, match=r"config\.json: specs/mamba\.yaml: conv_kernel below 2"):
        llm(tmp_path, target)
