"""FP8 block-scaled checkpoints kept in FP8 on the GPU path (``LLM(quantized_weights="keep")``): linear layers hold
float8 weights + ``weight_scale_inv`` and run ``runtime/ops/gpu/fp8.py``'s GEMM, against the dequantize-at-load path.

Runs on a CUDA GPU, or on the CPU through Triton's interpreter (``TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1``).

Tolerance: in float32 both paths compute the same function: the dequantized weight ``fp8 * scale_inv`` is exact in
float32 (a 4-bit significand times a float32 scale rounds at 2^-24 at most), so the kept path (scale applied to each
128-column block's float32 partial product) differs from the dequantized GEMM only by summation order: ~1e-6
relative per GEMM; 1e-4 absolute on logits of magnitude ~1 leaves two orders of magnitude of margin and still fails
for a scale applied to the wrong block (errors of the size of the weights themselves).
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu_helpers import DEV, KERNEL_MARKS
from tests.test_fp8_block import PROMPT, quantize_checkpoint

pytestmark = KERNEL_MARKS


@pytest.fixture(scope="module")
def fp8_path(tmp_path_factory):
    from tests.deepseek_fixtures import make_deepseek

    path = tmp_path_factory.mktemp("deepseek_fp8_keep")
    make_deepseek(path, "v3")
    quantize_checkpoint(path)
    return path


def _llm(path, mode, dtype=torch.float32, **kw):
    from modelgen.runtime.engine.llm import LLM

    return LLM(path, target="rocm", dtype=dtype, device=DEV, max_model_len=128, quantized_weights=mode,
               cuda_graphs=False, **kw)


def test_fp8_kept_equals_dequantized_deepseek(fp8_path, monkeypatch):
    from modelgen.runtime.layers.linear import LinearBase
    from modelgen.runtime.ops.gpu import fp8 as gpu_fp8

    calls = []
    real = gpu_fp8.block_fp8_linear
    monkeypatch.setattr(gpu_fp8, "block_fp8_linear", lambda *a, **k: calls.append(a[1].shape) or real(*a, **k))
    kept = _llm(fp8_path, "keep")
    # every attention / dense-MLP projection but MLA's kv_b_proj (read as a matrix for the absorbed decode); the
    # experts stay dequantized (the fused MoE kernels take bf16/fp32 experts)
    fp8_layers = {n for n, m in kept.model.named_modules() if isinstance(m, LinearBase) and m.fp8_block is not None}
    assert kept.quantized_weights["kept"] > 0 and kept.quantized_weights["dequantized"] > 0
    assert any(n.endswith("o_proj") for n in fp8_layers) and any(n.endswith("gate_up_proj") for n in fp8_layers)
    assert not any(n.endswith("kv_b_proj") for n in fp8_layers)
    for n in fp8_layers:
        m = kept.model.get_submodule(n)
        assert m.weight.dtype == torch.float8_e4m3fn and m.weight_scale_inv.dtype == torch.float32
    got = kept.score(PROMPT).float()
    assert calls, "the FP8 GEMM never ran"
    deq = _llm(fp8_path, "dequantize")
    assert deq.quantized_weights["kept"] == 0
    assert all(m.fp8_block is None for m in deq.model.modules() if isinstance(m, LinearBase))
    want = deq.score(PROMPT).float()
    err = (got - want).abs().max().item()
    assert err < 1e-4, f"FP8-kept logits differ from the dequantized path by {err}"
    params = lambda: __import__("modelgen").SamplingParams(max_new_tokens=8, ignore_eos=True)  # noqa: E731
    assert kept.generate([PROMPT[:12]], params()) == deq.generate([PROMPT[:12]], params())


def test_fp8_keep_is_gpu_path_only(fp8_path, monkeypatch):
    """MODELGEN_BACKEND=torch: the torch path dequantizes at load whatever the switch says."""
    from modelgen.runtime.ops import gpu

    monkeypatch.setenv("MODELGEN_BACKEND", "torch")
    gpu.refresh()
    try:
        llm = _llm(fp8_path, "keep")
        assert llm.quantized_weights["kept"] == 0 and "GPU path" in llm.quantized_weights["why_dequantized"]
    finally:
        monkeypatch.delenv("MODELGEN_BACKEND")
        gpu.refresh()


def test_quantized_weights_mode_is_checked(fp8_path):
    with pytest.raises(ValueError, match="quantized_weights 'fast': expected one of auto, keep, dequantize"):
        _llm(fp8_path, "fast")


def test_fp8_kept_qwen3_fused_qkv_and_gate_up(tmp_path):
    """Packed layers: q/k/v -> qkv_proj and gate/up -> gate_up_proj keep FP8 with each shard's scales at its block
    offset; logits within 1e-4 of the dequantized path (fp32)."""
    from modelgen.runtime.layers.linear import LinearBase
    from tests.moe_fixtures import make_moe

    make_moe(tmp_path, "qwen3")
    quantize_checkpoint(tmp_path)
    kept = _llm(tmp_path, "keep")
    fp8_layers = {n.rsplit(".", 1)[-1] for n, m in kept.model.named_modules()
                  if isinstance(m, LinearBase) and m.fp8_block is not None}
    assert {"qkv_proj", "gate_up_proj", "o_proj", "down_proj"} <= fp8_layers
    err = (kept.score(PROMPT).float() - _llm(tmp_path, "dequantize").score(PROMPT).float()).abs().max().item()
    assert err < 1e-4, err
