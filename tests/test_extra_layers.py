"""Checkpoint layers at index >= num_hidden_layers (GLM-4.5 / DeepSeek-V3 MTP layers) are skipped by normal loading.

Released GLM-4.5/4.6 weights carry ``model.layers.{num_hidden_layers}.*`` (the MTP draft layer, with extra tensors such
as ``eh_proj`` and ``enorm``). The main model must load and match transformers on both targets; strict coverage must
still catch anything else that is wrong.
"""
from __future__ import annotations

import json
import logging

import pytest
import torch
from safetensors.torch import load_file, save_file

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.loader.checkpoint import CheckpointError
from modelgen.runtime.loader.names import ExtraLayers
from tests.moe_fixtures import make_moe
from tests.test_parity_llama import PROMPT, hf_greedy, hf_logits


def test_extra_layers_rule():
    rule = ExtraLayers({"model.layers": 3})
    assert rule.match("model.layers.2.mlp.gate.weight") is None
    assert "layer 3 >= num_hidden_layers (3)" in rule.match("model.layers.3.eh_proj.weight")
    assert rule.match("model.layers.12.mlp.experts.0.up_proj.weight") is not None
    assert rule.match("model.norm.weight") is None
    assert rule.match("model.layers_x.5.weight") is None  # whole segments only
    assert ExtraLayers({}).match("model.layers.9.w") is None


def _with_mtp_layer(path):
    """Append a copy of the last layer as layer N plus DeepSeek/GLM MTP-only tensors, into the same shard."""
    cfg = json.loads((path / "config.json").read_text())
    n = cfg["num_hidden_layers"]
    shard = path / "model.safetensors"
    tensors = load_file(shard)
    last = f"model.layers.{n - 1}."
    for k, v in list(tensors.items()):
        if k.startswith(last):
            tensors[f"model.layers.{n}." + k[len(last):]] = v.clone()
    h = cfg["hidden_size"]
    tensors[f"model.layers.{n}.eh_proj.weight"] = torch.randn(h, 2 * h)
    tensors[f"model.layers.{n}.enorm.weight"] = torch.ones(h)
    tensors[f"model.layers.{n}.hnorm.weight"] = torch.ones(h)
    tensors[f"model.layers.{n}.shared_head.norm.weight"] = torch.ones(h)
    save_file(tensors, shard, metadata={"format": "pt"})
    return n


@pytest.fixture(scope="module")
def glm_with_mtp(tmp_path_factory):
    path = tmp_path_factory.mktemp("glm4_moe_mtp")
    hf = make_moe(path, "glm4_moe_qknorm", fused=False)
    n = _with_mtp_layer(path)
    return path, hf, n


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_glm4_moe_checkpoint_with_mtp_layer_loads_and_matches(glm_with_mtp, target, caplog):
    path, hf, n = glm_with_mtp
    with caplog.at_level(logging.INFO, logger="modelgen.loader"):
        llm = LLM(path, target=target, dtype="float32", max_model_len=128)
    assert any(f"layer {n} >= num_hidden_layers ({n})" in r.getMessage() for r in caplog.records)
    err = (llm.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < 1e-4
    assert llm.generate([PROMPT], SamplingParams(max_new_tokens=8, ignore_eos=True))[0] == hf_greedy(hf, PROMPT, 8)


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_strict_coverage_still_applies_inside_the_model(glm_with_mtp, tmp_path, target):
    path, _, n = glm_with_mtp
    for f in path.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    tensors = load_file(tmp_path / "model.safetensors")
    tensors[f"model.layers.{n - 1}.bogus.weight"] = torch.zeros(2)  # inside the model's layer range: not skipped
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=rf"model\.layers\.{n - 1}\.bogus\.weight"):
        LLM(tmp_path, target=target, dtype="float32", max_model_len=128)
