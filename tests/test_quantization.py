"""Quantized checkpoints: unsupported methods are refused up front by name; quantized-looking tensors get a hint;
modules' post-load hooks run once after loading (both targets)."""
from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.layers.norm import RMSNorm
from modelgen.runtime.loader.checkpoint import CheckpointError
from modelgen.runtime.loader.quantization import QuantizationError, check_quantization


def test_unquantized_config_passes():
    assert check_quantization({"architectures": ["LlamaForCausalLM"]}) is None
    assert check_quantization({"quantization_config": None}) is None


@pytest.mark.parametrize("method", ["awq", "gptq", "bitsandbytes", "compressed-tensors", "fbgemm_fp8"])
def test_unsupported_method_is_named(method):
    with pytest.raises(QuantizationError) as e:
        check_quantization({"quantization_config": {"quant_method": method, "bits": 4}}, "ckpt/config.json")
    msg = str(e.value)
    assert "\n" not in msg
    assert f"ckpt/config.json: quantization_config.quant_method '{method}' is not supported" in msg
    assert "supported:" in msg


def test_text_config_section_and_malformed_configs():
    with pytest.raises(QuantizationError, match=r"text_config\.quantization_config\.quant_method 'awq'"):
        check_quantization({"text_config": {"quantization_config": {"quant_method": "awq"}}})
    with pytest.raises(QuantizationError, match=r"quantization_config must be an object, got list"):
        check_quantization({"quantization_config": ["fp8"]})
    with pytest.raises(QuantizationError, match=r"quant_method is missing"):
        check_quantization({"quantization_config": {"bits": 4}})


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_quantized_looking_tensors_get_a_hint(llama_checkpoint, tmp_path, target):
    src, _ = llama_checkpoint("gqa")
    shutil.copytree(src, tmp_path / "ckpt")
    shard = tmp_path / "ckpt" / "model.safetensors"
    tensors = load_file(shard)
    tensors["model.layers.0.mlp.down_proj.weight_scale_inv"] = torch.ones(1, 1)
    save_file(tensors, shard, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"look quantized \(e\.g\. 'model\.layers\.0\.mlp\.down_proj\.weight_scale_inv'\)"):
        LLM(tmp_path / "ckpt", target=target, dtype="float32", max_model_len=64)


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_post_load_hook_runs_once_after_all_weights(llama_checkpoint, monkeypatch, target):
    path, hf = llama_checkpoint("gqa")
    seen: list[float] = []

    def hook(self):  # runs after loading: the weight already holds the checkpoint's values
        seen.append(float(self.weight.detach().float().sum()))

    monkeypatch.setattr(RMSNorm, "process_weights_after_loading", hook, raising=False)
    LLM(path, target=target, dtype="float32", max_model_len=64)
    want = float(hf.model.norm.weight.detach().sum())
    assert seen and any(abs(v - want) < 1e-4 for v in seen)


def test_dequantizing_views_never_take_the_gpu_raw_byte_path(monkeypatch):
    """The GPU read-ahead copies file bytes: for an FP8/MXFP4 view those are not the weights the model needs."""
    from types import SimpleNamespace

    from modelgen.runtime.loader import packed
    from modelgen.runtime.loader.mxfp4 import Mxfp4DequantCheckpoint
    from modelgen.runtime.loader.quantization import Fp8DequantCheckpoint

    cuda_param = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    model = SimpleNamespace(parameters=lambda: iter([cuda_param]))
    routes = []
    monkeypatch.setattr(packed, "_ReaderRoute", lambda *a: routes.append(a) or "route")
    for view in (Fp8DequantCheckpoint, Mxfp4DequantCheckpoint):
        assert view.raw_reads is False
        assert packed._device_reader(model, view.__new__(view), []) is None
    assert packed._device_reader(model, SimpleNamespace(), []) == "route"  # a plain checkpoint does
