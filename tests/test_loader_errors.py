"""Checkpoint errors through the generated loaders name the tensor, file, expected and actual shape/dtype."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.loader.checkpoint import CheckpointError
from modelgen.runtime.loader.names import IgnoreRules, apply_renames, resolve_packed
from tests.llama_fixtures import make_llama

TARGETS = ["rocm", "neuron"]


@pytest.fixture()
def ckpt(tmp_path):
    make_llama(tmp_path, "gqa")
    return tmp_path


def edit(ckpt, fn):
    path = ckpt / "model.safetensors"
    tensors = load_file(path)
    fn(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


@pytest.mark.parametrize("target", TARGETS)
def test_missing_tensor(ckpt, target):
    edit(ckpt, lambda t: t.pop("model.layers.1.self_attn.k_proj.weight"))
    with pytest.raises(CheckpointError) as e:
        LLM(ckpt, target=target, dtype="float32")
    msg = str(e.value)
    assert "missing" in msg and "model.layers.1.self_attn.qkv_proj" in msg
    if target == "neuron":  # the mapping's other keys of the fused parameter are then unused
        assert "model.layers.1.self_attn.q_proj.weight" in msg


@pytest.mark.parametrize("target", TARGETS)
def test_unexpected_tensor(ckpt, target):
    edit(ckpt, lambda t: t.__setitem__("model.layers.0.self_attn.mystery.weight", torch.zeros(2)))
    with pytest.raises(CheckpointError, match=r"unexpected[\s\S]*model.layers.0.self_attn.mystery.weight"):
        LLM(ckpt, target=target, dtype="float32")


@pytest.mark.parametrize("target", TARGETS)
def test_ignored_tensor_is_accepted(ckpt, target):
    edit(ckpt, lambda t: t.__setitem__("model.layers.0.self_attn.rotary_emb.inv_freq", torch.zeros(8)))
    LLM(ckpt, target=target, dtype="float32")  # listed under checkpoint.ignore in specs/llama.yaml


@pytest.mark.parametrize("target", TARGETS)
def test_wrong_shape(ckpt, target):
    edit(ckpt, lambda t: t.__setitem__("model.layers.0.mlp.down_proj.weight", torch.zeros(64, 95)))
    with pytest.raises(CheckpointError) as e:
        LLM(ckpt, target=target, dtype="float32")
    msg = str(e.value)
    assert "model.safetensors" in msg and "model.layers.0.mlp.down_proj.weight" in msg
    assert "(64, 95)" in msg and "96" in msg


@pytest.mark.parametrize("target", TARGETS)
def test_wrong_dtype(ckpt, target):
    edit(ckpt, lambda t: t.__setitem__("model.norm.weight", torch.ones(64, dtype=torch.int32)))
    with pytest.raises(CheckpointError, match=r"model.norm.weight.*torch.int32"):
        LLM(ckpt, target=target, dtype="float32")


@pytest.mark.parametrize("target", TARGETS)
def test_truncated_file(ckpt, target):
    path = ckpt / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match=r"model.safetensors.*(truncated|corrupt)"):
        LLM(ckpt, target=target, dtype="float32")


@pytest.mark.parametrize("target", TARGETS)
def test_corrupt_header(ckpt, target):
    (ckpt / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(CheckpointError, match=r"model.safetensors"):
        LLM(ckpt, target=target, dtype="float32")


def test_sharded_checkpoint_loads_and_missing_shard_is_named(tmp_path):
    hf = make_llama(tmp_path / "sharded", "gqa")
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2
    (tmp_path / "sharded" / "model.safetensors").unlink(missing_ok=True)
    ref = LLM(tmp_path / "sharded", target="rocm", dtype="float32")  # sharded load works
    assert ref.score([1, 2, 3]).shape == (3, 160)
    (tmp_path / "sharded" / shards[1]).unlink()
    with pytest.raises(CheckpointError, match=shards[1]):
        LLM(tmp_path / "sharded", target="neuron", dtype="float32")


def test_name_rewriting_rules():
    assert apply_renames("a.weight_scale_inv", [("weight_scale_inv", "weight_scale")]) == "a.weight_scale"
    rules = IgnoreRules(["model.layers.*.self_attn.rotary_emb.inv_freq"])
    assert rules.match("model.layers.12.self_attn.rotary_emb.inv_freq")
    assert rules.match("model.layers.1.2.self_attn.rotary_emb.inv_freq") is None  # * is one segment
    subtree = IgnoreRules(["model.visual.**", "mtp.**"])  # ** is any run of segments (vision towers, MTP heads)
    assert subtree.match("model.visual.blocks.0.attn.qkv.weight") == "model.visual.**"
    assert subtree.match("mtp.layers.0.mlp.experts.3.up_proj.weight") == "mtp.**"
    assert subtree.match("model.visual") is None and subtree.match("model.visualx.weight") is None
    packed = {"q_proj": ("qkv_proj", "q"), "gate_proj": ("gate_up_proj", 0)}
    assert resolve_packed("model.layers.3.self_attn.q_proj.weight", packed) == ("model.layers.3.self_attn.qkv_proj.weight", "q")
    assert resolve_packed("model.layers.3.self_attn.q_a_proj.weight", packed) == ("model.layers.3.self_attn.q_a_proj.weight", None)


def test_modelgen_run_reports_checkpoint_errors_without_traceback(ckpt):
    import subprocess
    import sys

    (ckpt / "model.safetensors").write_bytes(b"\xff" * 64)
    r = subprocess.run([sys.executable, "-m", "modelgen.cli", "run", "--checkpoint", str(ckpt), "--prompt-ids", "1,2"],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert "modelgen run: CheckpointError:" in r.stderr and "model.safetensors" in r.stderr
    assert "Traceback" not in r.stderr
