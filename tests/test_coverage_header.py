"""cli/coverage.py reads checkpoints through public loader API only: Checkpoint.header_dtype (the safetensors
header's dtype string, which FP8/MXFP4 views need from a lazy slice) and model_build.check_rope_table."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from modelgen.cli.coverage import HeaderCheckpoint
from modelgen.runtime.engine.model_build import check_rope_table
from modelgen.runtime.hf_config import ConfigError
from modelgen.runtime.loader.checkpoint import Checkpoint, CheckpointError


def test_header_dtype_is_the_file_header_string(tmp_path):
    tensors = {"a": torch.zeros(2, 3, dtype=torch.bfloat16), "b": torch.zeros(4, dtype=torch.float8_e4m3fn),
               "c": torch.zeros(1, dtype=torch.uint8)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({}))
    with Checkpoint(tmp_path, check_finite="off") as ckpt:
        assert [ckpt.header_dtype(k) for k in "abc"] == ["BF16", "F8_E4M3", "U8"]
        with pytest.raises(CheckpointError, match="'x' not found"):
            ckpt.header_dtype("x")
        header = HeaderCheckpoint(ckpt)
        # the meta slice coverage hands a loader answers get_dtype() as safetensors' own lazy slice does
        for k in "abc":
            s = header.get_slice(k)
            assert s.get_dtype() == ckpt.get_slice(k).get_dtype() == ckpt.header_dtype(k)
            assert s.get_shape() == list(tensors[k].shape)
        assert header.reads == {"a": 1, "b": 1, "c": 1}


def test_check_rope_table_is_public_and_refuses_an_absurd_context(tmp_path):
    class Config:
        max_position_embeddings, head_dim, num_attention_heads, hidden_size = 1 << 40, 128, 32, 4096

    with pytest.raises(ConfigError, match="max_position_embeddings"):
        check_rope_table(Config, tmp_path / "config.json", torch.device("cpu"))
    Config.max_position_embeddings = 8192
    check_rope_table(Config, tmp_path / "config.json", torch.device("cpu"))  # 8192 x 128 floats: fine
