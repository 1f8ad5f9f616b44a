"""FP8 block-scaled GEMM (``runtime/ops/gpu/fp8.py``) against the dequantized product of ``runtime/layers/fp8.py``.
Skipped without CUDA; ``TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1`` runs it through Triton's interpreter."""
from __future__ import annotations

import pytest
import torch

from tests.gpu_helpers import DEV, KERNEL_MARKS, LOW, cuda_only, rel

pytestmark = KERNEL_MARKS


def _quantized(N, K, block, seed):
    from modelgen.runtime.layers.fp8 import quantize_block_fp8

    w = torch.randn(N, K, generator=torch.Generator().manual_seed(seed)) * K ** -0.5
    w[: min(N, 7)] *= 40  # blocks with very different ranges: a scale applied to the wrong block shows
    q, s = quantize_block_fp8(w, block)
    return q.to(DEV), s.to(DEV)


@pytest.mark.parametrize("M,N,K", [(1, 200, 300), (5, 256, 384), (33, 130, 129), (70, 64, 512)])
@pytest.mark.parametrize("block", [(128, 128), (32, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
@pytest.mark.parametrize("split_k", [None, 1, 3])
def test_block_fp8_linear_matches_dequantized(M, N, K, block, dtype, split_k):
    from modelgen.runtime.layers.fp8 import dequantize_block_fp8
    from modelgen.runtime.ops.gpu.fp8 import block_fp8_linear

    q, s = _quantized(N, K, block, seed=M + N + K)
    x = torch.randn(M, K, device=DEV).to(dtype)
    bias = torch.randn(N, device=DEV).to(dtype) if M % 2 else None
    got = block_fp8_linear(x, q, s, block, bias=bias, split_k=split_k)
    want = x.double() @ dequantize_block_fp8(q.cpu(), s.cpu(), block, torch.float64).to(DEV).T
    if bias is not None:
        want = want + bias.double()
    assert got.shape == (M, N) and got.dtype == dtype
    assert rel(got, want) < (1e-5 if dtype == torch.float32 else 1e-2)


@pytest.mark.parametrize("N,K,block,config", [
    (200, 300, (128, 128), None), (256, 1024, (128, 128), (32, 3, 4)), (130, 129, (32, 64), (16, 2, 4)),
    (96, 512, (32, 64), (32, 5, 2)), (64, 384, (128, 128), (64, 1, 4))])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_fp8_gemv_matches_dequantized(N, K, block, config, dtype):
    """The one-row path: edge tiles (N, K not multiples of the tile or the scale block), split-K reduced by the
    last program (2-5 splits), bias; twice in a row (the arrival counters must be left at zero)."""
    from modelgen.runtime.layers.fp8 import dequantize_block_fp8
    from modelgen.runtime.ops.gpu.fp8 import fp8_gemv

    q, s = _quantized(N, K, block, seed=N + K)
    w = dequantize_block_fp8(q.cpu(), s.cpu(), block, torch.float64).to(DEV)
    for rep in range(2):
        x = torch.randn(1, K, device=DEV, generator=None).to(dtype)
        bias = torch.randn(N, device=DEV).to(dtype) if rep else None
        got = fp8_gemv(x, q, s.float(), block, bias=bias, config=config)
        want = x.double() @ w.T + (bias.double() if bias is not None else 0)
        assert got.shape == (1, N) and got.dtype == dtype
        assert rel(got, want) < (1e-5 if dtype == torch.float32 else 1e-2), (rep, rel(got, want))


def test_block_fp8_linear_refuses_mismatched_scales():
    from modelgen.runtime.ops.gpu.fp8 import block_fp8_linear

    q, s = _quantized(64, 256, (128, 128), seed=0)
    with pytest.raises(ValueError, match="do not match blocks"):
        block_fp8_linear(torch.randn(2, 256, device=DEV), q, s[:, :1], (128, 128))


@cuda_only
def test_block_fp8_linear_deepseek_shapes_bf16():
    """V3's kv_a (576 x 7168) and o_proj (7168 x 16384) at decode and prefill row counts."""
    from modelgen.runtime.layers.fp8 import dequantize_block_fp8
    from modelgen.runtime.ops.gpu.fp8 import block_fp8_linear

    for M, N, K in ((1, 576, 7168), (32, 7168, 16384), (300, 2048, 7168)):
        q, s = _quantized(N, K, (128, 128), seed=N)
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        want = x.float() @ dequantize_block_fp8(q, s, (128, 128), torch.float32).T
        assert rel(block_fp8_linear(x, q, s), want) < 1e-2


def test_auto_keeps_fp8_on_the_gpu_path(tmp_path):
    """``quantized_weights="auto"`` (the default) keeps FP8 checkpoints in FP8 on the GPU path (the faster mode in
    the H200 A/B, runtime/loader/quantization.py AUTO_KEEP) and still dequantizes MXFP4."""
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.loader.quantization import AUTO_KEEP
    from tests.deepseek_fixtures import make_deepseek
    from tests.test_fp8_block import quantize_checkpoint

    assert AUTO_KEEP == {"fp8": True, "mxfp4": False}
    make_deepseek(tmp_path, "v3")
    quantize_checkpoint(tmp_path)
    llm = LLM(tmp_path, target="rocm", dtype=torch.float32, device=DEV, max_model_len=64, cuda_graphs=False)
    report = llm.quantized_weights
    assert report["mode"] == "auto" and report["kept"] > 0, report


@cuda_only
def test_fp8_gemv_timed_choice():
    """On a GPU the one-row config is timed once per shape (outside a capture) among the table's and the sweep's
    winners, remembered, and the product stays the dequantized one whichever config won."""
    from modelgen.runtime.layers.fp8 import dequantize_block_fp8
    from modelgen.runtime.ops.gpu import fp8

    N, K = 1536, 7168
    q, s = _quantized(N, K, (128, 128), seed=11)
    x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
    key = (N, K, (128, 128), torch.bfloat16, False)
    fp8._GEMV_CHOICE.pop(key, None)
    got = fp8.fp8_gemv(x, q, s.float(), (128, 128))
    chosen = fp8._GEMV_CHOICE[key]
    assert chosen == fp8.gemv_config(N, K, (128, 128), 0) or chosen in fp8.GEMV_CANDIDATES
    assert len(fp8.GEMV_TIMINGS[key]) > 1
    want = x.float() @ dequantize_block_fp8(q, s, (128, 128), torch.float32).T
    assert rel(got, want) < 1e-2
