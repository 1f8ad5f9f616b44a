"""Tests for modelgen.runtime.loader.checkpoint: the safetensors checkpoint reader."""

from __future__ import annotations

import json
import pathlib
import re

import pytest
import torch
from safetensors.torch import save_file

from modelgen.runtime.loader.checkpoint import Checkpoint, CheckpointError, read_json_if_exists


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "model.embed_tokens.weight": torch.randn(16, 8, generator=g),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8, generator=g).to(torch.bfloat16),
        "model.layers.0.self_attn.k_proj.weight": torch.randn(4, 8, generator=g).to(torch.float16),
        "model.layers.0.mlp.gate_proj.weight": torch.randn(12, 8, generator=g),
        "model.layers.1.self_attn.q_proj.weight": torch.randn(8, 8, generator=g),
        "model.norm.weight": torch.ones(8),
        "lm_head.weight": torch.randn(16, 8, generator=g),
        "counts": torch.arange(5, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
    }


def _write_sharded(d: pathlib.Path, tensors: dict[str, torch.Tensor], n: int = 3) -> dict[str, str]:
    names = sorted(tensors)
    weight_map = {}
    for i in range(n):
        shard = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        part = {k: tensors[k].contiguous() for k in names[i::n]}
        save_file(part, str(d / shard), metadata={"format": "pt"})
        weight_map.update({k: shard for k in part})
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map})
    )
    return weight_map


def _esc(p) -> str:
    return re.escape(str(p))


# --------------------------------------------------------------------------- happy paths


def test_single_file(tmp_path):
    t = _tensors()
    f = tmp_path / "model.safetensors"
    save_file(t, str(f))
    for path in (f, tmp_path):  # the file itself, or the directory holding it
        with Checkpoint(path) as ck:
            assert ck.keys() == sorted(t)
            assert ck.files == [f]
            for k, v in t.items():
                assert k in ck
                assert ck.file_of(k) == f
                assert ck.shape(k) == tuple(v.shape)
                assert ck.dtype(k) == v.dtype
                got = ck.get_tensor(k)
                assert got.dtype == v.dtype and torch.equal(got, v)
            assert "nope" not in ck and 3 not in ck


def test_sharded_with_index(tmp_path):
    t = _tensors()
    wm = _write_sharded(tmp_path, t, n=3)
    # a stray file not named by the index is ignored (e.g. Mistral's consolidated.safetensors)
    save_file({"model.norm.weight": torch.zeros(8)}, str(tmp_path / "consolidated.safetensors"))
    ck = Checkpoint(tmp_path)
    assert len(ck.files) == 3
    assert ck.index_path == tmp_path / "model.safetensors.index.json"
    assert ck.keys() == sorted(t)
    for k, v in t.items():
        assert ck.file_of(k) == tmp_path / wm[k]
        assert torch.equal(ck.get_tensor(k), v)
    assert ck.metadata(ck.files[0]) == {"format": "pt"}
    ck.close()
    with pytest.raises(CheckpointError, match="closed"):
        ck.get_tensor("lm_head.weight")


def test_index_file_path_accepted(tmp_path):
    t = _tensors()
    _write_sharded(tmp_path, t, n=3)
    with Checkpoint(tmp_path / "model.safetensors.index.json") as ck:
        assert ck.keys() == sorted(t)


def test_multiple_files_without_index(tmp_path):
    t = _tensors()
    names = sorted(t)
    save_file({k: t[k] for k in names[:4]}, str(tmp_path / "b.safetensors"))
    save_file({k: t[k] for k in names[4:]}, str(tmp_path / "a.safetensors"))
    with Checkpoint(str(tmp_path)) as ck:
        assert ck.files == [tmp_path / "a.safetensors", tmp_path / "b.safetensors"]
        assert ck.keys() == names
        for k in names:
            assert torch.equal(ck.get_tensor(k), t[k])


def test_slices(tmp_path):
    t = _tensors()
    _write_sharded(tmp_path, t, n=3)
    with Checkpoint(tmp_path) as ck:
        w = t["model.layers.0.mlp.gate_proj.weight"]
        s = ck.get_slice("model.layers.0.mlp.gate_proj.weight")
        assert list(s.get_shape()) == [12, 8]
        assert torch.equal(s[4:8], w[4:8])
        assert torch.equal(s[:, 2:6], w[:, 2:6])
        assert torch.equal(s[1:3, 5:], w[1:3, 5:])
        q = ck.get_slice("model.layers.0.self_attn.q_proj.weight")
        part = q[0:2]
        assert part.dtype == torch.bfloat16
        assert torch.equal(part, t["model.layers.0.self_attn.q_proj.weight"][0:2])


def test_empty_and_scalar_tensors(tmp_path):
    f = tmp_path / "x.safetensors"
    save_file({"empty": torch.zeros(0, 4), "scalar": torch.tensor(3.5)}, str(f))
    with Checkpoint(f) as ck:
        assert ck.shape("empty") == (0, 4)
        assert ck.shape("scalar") == ()
        assert ck.get_tensor("scalar").item() == 3.5


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="torch without float8")
def test_float8_dtype_from_header(tmp_path):
    f = tmp_path / "fp8.safetensors"
    save_file({"w": torch.randn(4, 4).to(torch.float8_e4m3fn), "v": torch.randn(2).to(torch.float8_e5m2)}, str(f))
    with Checkpoint(f) as ck:
        assert ck.dtype("w") == torch.float8_e4m3fn
        assert ck.dtype("v") == torch.float8_e5m2


def test_read_json_if_exists(tmp_path):
    assert read_json_if_exists(tmp_path / "missing.json") is None
    (tmp_path / "c.json").write_text('{"a": 1}')
    assert read_json_if_exists(tmp_path / "c.json") == {"a": 1}
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(CheckpointError, match=_esc(tmp_path / "bad.json")):
        read_json_if_exists(tmp_path / "bad.json")


# --------------------------------------------------------------------------- errors


def test_truncated_file(tmp_path):
    f = tmp_path / "model.safetensors"
    save_file(_tensors(), str(f))
    data = f.read_bytes()
    f.write_bytes(data[:-10])
    with pytest.raises(CheckpointError, match=_esc(f) + r".*truncated.*10 bytes missing"):
        Checkpoint(tmp_path)


def test_truncated_inside_header(tmp_path):
    f = tmp_path / "model.safetensors"
    save_file(_tensors(), str(f))
    f.write_bytes(f.read_bytes()[:40])
    with pytest.raises(CheckpointError, match=_esc(f) + r".*header length"):
        Checkpoint(f)


def test_tiny_file(tmp_path):
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"\x01\x02")
    with pytest.raises(CheckpointError, match=_esc(f) + r".*too short"):
        Checkpoint(f)


def test_corrupt_header_garbage(tmp_path):
    f = tmp_path / "model.safetensors"
    f.write_bytes(bytes(range(256)) * 8)  # garbage: absurd header length
    with pytest.raises(CheckpointError, match=_esc(f) + r".*corrupt"):
        Checkpoint(f)


def test_corrupt_header_bad_json(tmp_path):
    f = tmp_path / "model.safetensors"
    garbage = b"{this is not json!!}"
    f.write_bytes(len(garbage).to_bytes(8, "little") + garbage + b"\x00" * 16)
    with pytest.raises(CheckpointError, match=_esc(f) + r".*header is not valid JSON"):
        Checkpoint(f)


def test_header_size_mismatch(tmp_path):
    f = tmp_path / "model.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}).encode()
    f.write_bytes(len(header).to_bytes(8, "little") + header + b"\x00" * 12)
    with pytest.raises(CheckpointError, match=_esc(f) + r".*'w'.*needs 16 bytes"):
        Checkpoint(f)


def test_safetensors_own_error_is_wrapped(tmp_path):
    # Header passes our checks but safetensors rejects it (trailing bytes not covered).
    f = tmp_path / "model.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    f.write_bytes(len(header).to_bytes(8, "little") + header + b"\x00" * 8)
    with pytest.raises(CheckpointError, match=_esc(f) + r".*safetensors cannot open"):
        Checkpoint(f)


def test_index_names_missing_shard(tmp_path):
    t = _tensors()
    wm = _write_sharded(tmp_path, t, n=3)
    gone = tmp_path / "model-00002-of-00003.safetensors"
    gone.unlink()
    some = sorted(k for k, s in wm.items() if s == gone.name)[0]
    with pytest.raises(CheckpointError, match=_esc(gone) + r".*" + re.escape(some)):
        Checkpoint(tmp_path)


def test_index_tensor_not_in_shard(tmp_path):
    t = _tensors()
    _write_sharded(tmp_path, t, n=3)
    idx = tmp_path / "model.safetensors.index.json"
    data = json.loads(idx.read_text())
    data["weight_map"]["model.ghost.weight"] = "model-00001-of-00003.safetensors"
    idx.write_text(json.dumps(data))
    with pytest.raises(
        CheckpointError, match=r"'model\.ghost\.weight'.*" + _esc(tmp_path / "model-00001-of-00003.safetensors")
    ):
        Checkpoint(tmp_path)


def test_index_points_to_wrong_shard(tmp_path):
    t = _tensors()
    wm = _write_sharded(tmp_path, t, n=3)
    idx = tmp_path / "model.safetensors.index.json"
    name = "lm_head.weight"
    wrong = next(s for s in sorted(set(wm.values())) if s != wm[name])
    data = json.loads(idx.read_text())
    data["weight_map"][name] = wrong
    idx.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"'lm_head\.weight' is not in shard " + _esc(tmp_path / wrong)):
        Checkpoint(tmp_path)


def test_duplicate_tensor_across_files(tmp_path):
    save_file({"a": torch.zeros(2), "shared.weight": torch.zeros(3)}, str(tmp_path / "one.safetensors"))
    save_file({"b": torch.zeros(2), "shared.weight": torch.ones(3)}, str(tmp_path / "two.safetensors"))
    with pytest.raises(
        CheckpointError,
        match=r"'shared\.weight'.*" + _esc(tmp_path / "one.safetensors") + ".*" + _esc(tmp_path / "two.safetensors"),
    ):
        Checkpoint(tmp_path)


def test_duplicate_tensor_across_indexed_shards(tmp_path):
    save_file({"a": torch.zeros(2), "x": torch.zeros(3)}, str(tmp_path / "s1.safetensors"))
    save_file({"b": torch.zeros(2), "x": torch.ones(3)}, str(tmp_path / "s2.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors", "x": "s1.safetensors"}})
    )
    with pytest.raises(CheckpointError, match=r"'x'.*two files.*s1\.safetensors.*s2\.safetensors"):
        Checkpoint(tmp_path)


def test_bad_index_json(tmp_path):
    _write_sharded(tmp_path, _tensors(), n=3)
    idx = tmp_path / "model.safetensors.index.json"
    idx.write_text('{"weight_map": {"a": "model-00001')
    with pytest.raises(CheckpointError, match=_esc(idx) + r".*not valid JSON"):
        Checkpoint(tmp_path)


def test_index_without_weight_map(tmp_path):
    _write_sharded(tmp_path, _tensors(), n=3)
    idx = tmp_path / "model.safetensors.index.json"
    idx.write_text(json.dumps({"metadata": {}}))
    with pytest.raises(CheckpointError, match=_esc(idx) + r".*weight_map"):
        Checkpoint(tmp_path)


def test_unknown_tensor_suggests_close_matches(tmp_path):
    save_file(_tensors(), str(tmp_path / "model.safetensors"))
    with Checkpoint(tmp_path) as ck:
        for fn in (ck.get_tensor, ck.get_slice, ck.shape, ck.dtype, ck.file_of):
            with pytest.raises(
                CheckpointError,
                match=r"'model\.layers\.0\.self_attn\.q_proj\.weights' not found.*did you mean.*"
                r"'model\.layers\.0\.self_attn\.q_proj\.weight'",
            ):
                fn("model.layers.0.self_attn.q_proj.weights")
        with pytest.raises(CheckpointError, match=r"'zzz' not found.*9 tensors"):
            ck.get_tensor("zzz")


def test_empty_directory(tmp_path):
    with pytest.raises(CheckpointError, match=_esc(tmp_path) + r".*no safetensors"):
        Checkpoint(tmp_path)


def test_directory_with_only_pickle(tmp_path):
    torch.save({"w": torch.zeros(2)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"no safetensors.*pytorch_model\.bin.*not loaded, on purpose"):
        Checkpoint(tmp_path)


def test_missing_path(tmp_path):
    with pytest.raises(CheckpointError, match=_esc(tmp_path / "nope") + ".*does not exist"):
        Checkpoint(tmp_path / "nope")
