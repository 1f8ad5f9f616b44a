"""GLM-5 "shared" DSA layers (``indexer_types``) vs transformers' GlmMoeDsaForCausalLM, both targets.

A shared layer has no indexer (no ``indexer.*`` weights) and attends over the top-``index_topk`` keys the nearest
earlier full layer selected (HF ``prev_topk_indices``). Here: 4 layers full/shared/full/shared with ``index_topk`` 16
below the 60-token prompt, so every layer attends a strict subset of the keys:

* fp32 prefill logits within 1e-4 of HF and 16 greedy tokens equal (teacher-forced full forwards), bf16 three-way;
* the shared layers really select (forcing them dense moves the logits) and decode / chunked prefill through them
  equal one-shot prefill (the selection is rebuilt from the source layer's index inputs at every step);
* the layer schedule from ``index_topk_freq`` / ``index_skip_topk_offset`` when config.json has no ``indexer_types``
  equals GlmMoeDsaConfig's; a shared layer 0 is refused.
"""
from __future__ import annotations

import copy
import json

import pytest
import torch

from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.testing import assert_close_three_way
from tests.deepseek_fixtures import make_deepseek
from tests.parity_helpers import checkpoint_cache, hf_greedy_forward, hf_logits, llm
from tests.test_parity_deepseek import PROMPT
from tests.test_parity_llama import THREE_WAY_FACTOR

TARGETS = ["rocm", "neuron"]
SHARED = dict(num_hidden_layers=4, index_topk=16, indexer_types=["full", "shared", "full", "shared"],
              mlp_layer_types=["sparse", "dense", "sparse", "sparse"])


def _make(path, name, fused=False):
    return make_deepseek(path, "glm5_sparse", fused=fused, **SHARED)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return checkpoint_cache(tmp_path_factory, _make)("glm5_shared")


def _shared_attentions(model, target):
    layers = model.model.model.layers
    return [layers[i].self_attn for i, t in enumerate(SHARED["indexer_types"]) if t == "shared"]


@pytest.mark.parametrize("target", TARGETS)
def test_against_hf_fp32(checkpoint, target):
    path, hf = checkpoint
    model = llm(path, target, strict_config=True)
    err = (model.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < 1e-4, f"{target}: prefill logits differ by {err}"
    out = model.generate([PROMPT], SamplingParams(max_new_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy_forward(hf, PROMPT, 16)


@pytest.mark.parametrize("target", TARGETS)
def test_against_hf_bf16_three_way(checkpoint, target):
    path, hf = checkpoint
    gold = hf_logits(hf, PROMPT)
    floor = hf_logits(copy.deepcopy(hf).to(torch.bfloat16), PROMPT)
    ours = llm(path, target, dtype="bfloat16").score(PROMPT).float()
    assert_close_three_way(gold, floor, ours, factor=THREE_WAY_FACTOR, atol=1e-2, name=f"glm5_shared/{target}")


@pytest.mark.parametrize("target", TARGETS)
def test_shared_layers_have_no_indexer_and_do_select(checkpoint, target):
    path, hf = checkpoint
    assert [getattr(layer.self_attn, "indexer", None) is None for layer in hf.model.layers] == \
        [t == "shared" for t in SHARED["indexer_types"]]
    model = llm(path, target)
    shared = _shared_attentions(model, target)
    for attn in shared:
        names = [n for n, _ in attn.named_parameters()]
        assert names and not any("indexer" in n for n in names), names
    want = model.score(PROMPT)
    for attn in shared:  # every key selected on the shared layers only
        attn.index_topk = len(PROMPT)
    assert (model.score(PROMPT) - want).abs().max().item() > 1e-3


@pytest.mark.parametrize("target", TARGETS)
def test_decode_and_chunked_prefill_through_shared_layers(checkpoint, target):
    path, _ = checkpoint
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    model = llm(path, target, block_size=4)
    out = model.generate([PROMPT], params)[0]
    assert model.score(PROMPT + out)[len(PROMPT) - 1:-1].argmax(-1).tolist() == out
    extra = {"prefill_buckets": [16, 256]} if target == "neuron" else {}
    chunked = llm(path, target, max_num_batched_tokens=16, block_size=8, **extra)
    assert chunked.generate([PROMPT], params)[0] == out


def test_schedule_from_freq_and_offset(checkpoint, tmp_path):
    """config.json without indexer_types: every index_topk_freq-th layer from index_skip_topk_offset - 1 on keeps
    its indexer (GlmMoeDsaConfig.__post_init__), the others share."""
    import transformers

    path, _ = checkpoint
    want = transformers.GlmMoeDsaConfig(num_hidden_layers=4, index_topk_freq=2, index_skip_topk_offset=2).indexer_types
    assert want == ["full", "full", "shared", "full"]
    d = tmp_path / "freq"
    d.mkdir()
    for f in path.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((path / "config.json").read_text())
    del cfg["indexer_types"]
    (d / "config.json").write_text(json.dumps(dict(cfg, index_topk_freq=2, index_skip_topk_offset=2)))
    from modelgen.generated.rocm.glm_moe_dsa.config import GlmMoeDsaConfig

    config = GlmMoeDsaConfig.from_hf_config(json.loads((d / "config.json").read_text()))
    assert [config.layer_block(i).endswith("_shared") for i in range(4)] == [t == "shared" for t in want]


def test_shared_first_layer_is_refused(tmp_path):
    from modelgen.runtime.hf_config import ConfigError

    make_deepseek(tmp_path, "glm5_dense", indexer_types=["shared", "full", "full"])
    with pytest.raises(ConfigError, match="layer 0 is 'shared'"):
        llm(tmp_path, "rocm")


@pytest.mark.slow
def test_neuron_buckets_trace_fullgraph(checkpoint):
    """The shared layers read the index inputs a full layer left in the step's metadata dict: still one graph per
    bucket (torch.compile fullgraph), equal to eager."""
    torch._dynamo.reset()
    path, _ = checkpoint
    buckets = dict(prefill_buckets=[64], decode_buckets=[1, 2], decode_context_buckets=[128], max_model_len=128,
                   max_num_seqs=2, block_size=16)
    prompts = [PROMPT[:50], PROMPT[:9]]
    params = SamplingParams(max_new_tokens=5, ignore_eos=True)
    want = llm(path, "neuron", **buckets).generate(prompts, params)
    compiled = llm(path, "neuron", compile=True, **buckets)
    compiled.warmup()  # fullgraph=True: a graph break in any bucket raises here
    assert compiled.generate(prompts, params) == want
