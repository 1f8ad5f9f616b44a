"""Checkpoints are untrusted: shards must resolve inside the checkpoint directory (index entries, symlinks) unless
``allow_external_shards``; NaN/Inf weights are refused at load with the tensor and file named unless
``check_finite=False``."""
from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.loader.checkpoint import Checkpoint, CheckpointError, check_finite_tensor


def _write(path, tensors):
    save_file(tensors, str(path), metadata={"format": "pt"})


def _index(directory, weight_map):
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


@pytest.fixture
def outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    _write(d / "x.safetensors", {"b": torch.ones(2)})
    return d


@pytest.fixture
def ckpt_dir(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    _write(d / "a.safetensors", {"a": torch.zeros(2)})
    return d


def test_index_parent_path_refused_even_when_it_exists(ckpt_dir, outside):
    _index(ckpt_dir, {"a": "a.safetensors", "b": "../outside/x.safetensors"})
    with pytest.raises(CheckpointError) as info:
        Checkpoint(ckpt_dir)
    msg = str(info.value)
    assert "weight_map shard '../outside/x.safetensors' (tensor 'b')" in msg
    assert "outside the checkpoint directory" in msg and "allow_external_shards=True" in msg
    with Checkpoint(ckpt_dir, allow_external_shards=True) as ck:
        assert ck.get_tensor("b").tolist() == [1.0, 1.0]


@pytest.mark.parametrize("shard", ["/etc/passwd", "/nonexistent/x.safetensors"])
def test_index_absolute_path_refused(ckpt_dir, shard):
    _index(ckpt_dir, {"a": "a.safetensors", "b": shard})
    with pytest.raises(CheckpointError, match=f"weight_map shard '{shard}' \\(tensor 'b'\\) is an absolute path; "
                                              f"refused"):
        Checkpoint(ckpt_dir)


def test_index_nested_dotdot_that_stays_inside_is_fine(ckpt_dir):
    (ckpt_dir / "sub").mkdir()
    _write(ckpt_dir / "sub" / "b.safetensors", {"b": torch.ones(1)})
    _index(ckpt_dir, {"a": "sub/../a.safetensors", "b": "sub/b.safetensors"})
    with Checkpoint(ckpt_dir) as ck:
        assert sorted(ck.keys()) == ["a", "b"]


def test_symlinked_shard_outside_refused_in_directory_listing(ckpt_dir, outside):
    (ckpt_dir / "b.safetensors").symlink_to(outside / "x.safetensors")
    with pytest.raises(CheckpointError, match=r"b.safetensors: shard file resolves to .*outside/x.safetensors, "
                                              r"outside the checkpoint directory"):
        Checkpoint(ckpt_dir)
    with Checkpoint(ckpt_dir, allow_external_shards=True) as ck:
        assert sorted(ck.keys()) == ["a", "b"]


def test_symlinked_shard_outside_refused_through_index(ckpt_dir, outside):
    (ckpt_dir / "b.safetensors").symlink_to(outside / "x.safetensors")
    _index(ckpt_dir, {"a": "a.safetensors", "b": "b.safetensors"})
    with pytest.raises(CheckpointError, match="weight_map shard 'b.safetensors' .* outside the checkpoint"):
        Checkpoint(ckpt_dir)


def test_symlinked_index_outside_refused(ckpt_dir, outside):
    (outside / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "a.safetensors"}}))
    (ckpt_dir / "model.safetensors.index.json").symlink_to(outside / "model.safetensors.index.json")
    with pytest.raises(CheckpointError, match="index file resolves to .* outside the checkpoint directory"):
        Checkpoint(ckpt_dir)


def test_symlink_within_the_directory_is_followed(ckpt_dir):
    (ckpt_dir / "real").mkdir()
    _write(ckpt_dir / "real" / "b.bin.safetensors", {"b": torch.ones(3)})
    (ckpt_dir / "b.safetensors").symlink_to(ckpt_dir / "real" / "b.bin.safetensors")
    with Checkpoint(ckpt_dir) as ck:
        assert ck.get_tensor("b").shape == (3,)


def test_hub_cache_layout_is_allowed(tmp_path):
    """``models--org--name/snapshots/<rev>/x -> ../../blobs/<sha>`` is how huggingface_hub stores downloads."""
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    _write(repo / "blobs" / "deadbeef", {"w": torch.ones(2)})
    os.symlink("../../blobs/deadbeef", snap / "model.safetensors")
    with Checkpoint(snap) as ck:
        assert ck.keys() == ["w"]
    # ...but only into that repository's blobs/, not a sibling repository's.
    other = tmp_path / "hub" / "models--org--other" / "blobs"
    other.mkdir(parents=True)
    _write(other / "cafe", {"v": torch.ones(2)})
    os.symlink(other / "cafe", snap / "extra.safetensors")
    with pytest.raises(CheckpointError, match="extra.safetensors: shard file resolves to .*outside"):
        Checkpoint(snap)


# ------------------------------------------------------------------------------------------------------ numerics
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nonfinite_weight_named_with_file(tmp_path, dtype, bad):
    t = torch.randn(16, 8).to(dtype)
    t[7, 3] = bad
    _write(tmp_path / "m.safetensors", {"ok": torch.randn(4).to(dtype), "layer.w": t})
    with Checkpoint(tmp_path) as ck:
        assert ck.get_tensor("ok").shape == (4,)
        with pytest.raises(CheckpointError) as info:
            ck.get_tensor("layer.w")
        msg = str(info.value)
        assert msg.startswith(str(tmp_path / "m.safetensors"))
        assert "tensor 'layer.w' holds 1 NaN/Inf value(s) of 128 (first at index (7, 3))" in msg
        with pytest.raises(CheckpointError, match="tensor 'layer.w' holds 1 NaN/Inf"):
            ck.get_slice("layer.w")[4:8]  # the neuron loaders read through slices
        assert ck.get_slice("layer.w")[0:4].shape == (4, 8)  # a clean part of the tensor reads fine
    with Checkpoint(tmp_path, check_finite=False) as ck:
        assert not torch.isfinite(ck.get_tensor("layer.w")).all()


def test_large_finite_values_whose_sum_overflows_are_accepted():
    """Values near the float32 limit (whose sum would overflow) are finite: the check must not flag them."""
    t = torch.full((4,), 3e38, dtype=torch.float32)
    assert not torch.isfinite(t.sum())
    check_finite_tensor(t, "big", "f.safetensors")  # no error
    check_finite_tensor(torch.arange(10), "ints", "f.safetensors")  # integer tensors are skipped


def test_float8_checked_exactly():
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("no float8 in this torch")
    t = torch.zeros(4).to(torch.float8_e4m3fn)
    check_finite_tensor(t, "fp8", "f.safetensors")
    t = torch.tensor([0.0, float("nan")]).to(torch.float8_e4m3fn)
    with pytest.raises(CheckpointError, match="tensor 'fp8' holds 1 NaN/Inf"):
        check_finite_tensor(t, "fp8", "f.safetensors")


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_llm_refuses_nan_weights(llama_checkpoint, tmp_path, target):
    src, _ = llama_checkpoint("gqa")
    d = tmp_path / "nan"
    shutil.copytree(src, d)
    tensors = load_file(d / "model.safetensors")
    tensors["model.layers.0.self_attn.k_proj.weight"][1, 2] = float("nan")
    _write(d / "model.safetensors", tensors)
    with pytest.raises(CheckpointError, match="tensor 'model.layers.0.self_attn.k_proj.weight' holds 1 NaN/Inf"):
        LLM(d, target=target, dtype="float32", max_model_len=32)
    llm = LLM(d, target=target, dtype="float32", max_model_len=32, check_finite=False)
    assert len(llm.generate([[1, 2, 3]], SamplingParams(max_new_tokens=2, ignore_eos=True))[0]) == 2


def test_llm_refuses_external_shard(llama_checkpoint, tmp_path):
    src, _ = llama_checkpoint("gqa")
    d, out = tmp_path / "ck", tmp_path / "elsewhere"
    shutil.copytree(src, d)
    out.mkdir()
    shutil.move(d / "model.safetensors", out / "model.safetensors")
    _index(d, {k: "../elsewhere/model.safetensors" for k in load_file(out / "model.safetensors")})
    with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
        LLM(d, dtype="float32", max_model_len=32)
    LLM(d, dtype="float32", max_model_len=32, allow_external_shards=True)


def test_sampled_mode_reads_a_fraction_and_finds_regions():
    """Sampled: tensors up to one 64 KiB block whole; larger ones by every 64th block counted back from the last. A
    NaN/Inf region as long as the stride is always found; an isolated value between sampled blocks is the documented
    miss (full finds it)."""
    from modelgen.runtime.loader import checkpoint as ck

    block = ck._SAMPLE_BLOCK_BYTES // 4
    stride = ck._SAMPLE_STRIDE
    nblocks = 2 * stride + 5
    head = 100  # elements before the first whole block (blocks are aligned to the end)
    big = torch.zeros(head + nblocks * block)[1:]  # a view with a storage offset, as safetensors tensors have
    check_finite_tensor(big, "big", "f.safetensors", "sampled")
    sampled = [b for b in range(nblocks) if (nblocks - 1 - b) % stride == 0]
    assert sampled == [4, 4 + stride, nblocks - 1]

    def start_of(b):
        return head - 1 + b * block

    for b in sampled:
        for where in (0, block - 1):
            t = big.clone()
            t[start_of(b) + where] = float("inf")
            with pytest.raises(CheckpointError, match="tensor 'big' holds 1 NaN/Inf"):
                check_finite_tensor(t, "big", "f.safetensors", "sampled")
    region = big.clone()
    region[start_of(10) : start_of(10 + stride)] = float("nan")  # any run of `stride` blocks covers a sampled one
    with pytest.raises(CheckpointError):
        check_finite_tensor(region, "big", "f.safetensors", "sampled")
    isolated = big.clone()
    isolated[start_of(7) + 3] = float("nan")
    check_finite_tensor(isolated, "big", "f.safetensors", "sampled")  # not sampled: documented
    with pytest.raises(CheckpointError, match=f"first at index \\({start_of(7) + 3},\\)"):
        check_finite_tensor(isolated, "big", "f.safetensors", "full")
    small = torch.zeros(1000)
    small[999] = float("nan")
    with pytest.raises(CheckpointError):
        check_finite_tensor(small, "small", "f.safetensors", "sampled")  # <= 64 KiB: whole


def test_overflowing_sum_of_finite_values_is_not_an_error():
    """The fast test sums; finite values whose sum overflows (here fp16 and fp32) fall back to the exact min/max."""
    check_finite_tensor(torch.full((1000,), 60000.0, dtype=torch.float16), "h", "f.safetensors")
    check_finite_tensor(torch.full((1000,), 3e38), "f", "f.safetensors", "sampled")
    t = torch.full((1000,), 60000.0, dtype=torch.float16)
    t[5] = float("-inf")
    with pytest.raises(CheckpointError, match="tensor 'h' holds 1 NaN/Inf"):
        check_finite_tensor(t, "h", "f.safetensors")


@pytest.mark.parametrize("mode", ["sampled", "full", True])
def test_checkpoint_modes(tmp_path, mode):
    t = torch.zeros(8)
    t[3] = float("nan")
    _write(tmp_path / "m.safetensors", {"w": t})
    with Checkpoint(tmp_path, check_finite=mode) as ck, pytest.raises(CheckpointError, match="tensor 'w'"):
        ck.get_tensor("w")
    with pytest.raises(ValueError, match="check_finite = 'some': expected True, False or one of full, sampled, off"):
        Checkpoint(tmp_path, check_finite="some")


def test_parameter_check_of_the_device_path_names_the_parameter(llama_checkpoint, tmp_path):
    """On a GPU the parameters are checked after the copy (one sync for all); run here on CPU tensors."""
    from modelgen.runtime.engine.model_build import _check_parameters_finite

    src, _ = llama_checkpoint("gqa")
    d = tmp_path / "nan"
    shutil.copytree(src, d)
    tensors = load_file(d / "model.safetensors")
    tensors["model.layers.1.mlp.up_proj.weight"][10, 2] = float("inf")
    _write(d / "model.safetensors", tensors)
    llm = LLM(d, dtype="float32", max_model_len=32, check_finite="off")
    # up_proj is the second shard of the fused gate_up parameter: row 10 of it is row intermediate_size + 10.
    with pytest.raises(CheckpointError, match=r"parameter 'model.layers.1.mlp.gate_up_proj.weight' holds 1 NaN/Inf "
                                              r"value\(s\) of \d+ \(first at index \(106, 2\)\)"):
        _check_parameters_finite(llm.model, d, torch.device("cpu"))
    _check_parameters_finite(LLM(src, dtype="float32", max_model_len=32).model, src, torch.device("cpu"))
    with pytest.raises(ValueError, match="check_finite = 'bogus'"):
        LLM(src, dtype="float32", max_model_len=32, check_finite="bogus")
