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

from tests.gpu_helpers import (DEV, KERNEL_MARKS, assert_graph_replays_match_eager, assert_kept_matches_dequantized,
                                cuda_only)
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
    from modelgen.runtime.layers.moe import kernels_fp8 as moe_fp8
    from modelgen.runtime.ops.gpu import fp8 as gpu_fp8

    calls, moe_calls = [], []
    real, real_moe = gpu_fp8.block_fp8_linear, moe_fp8.fused_moe_fp8
    monkeypatch.setattr(gpu_fp8, "block_fp8_linear", lambda *a, **k: calls.append(a[1].shape) or real(*a, **k))
    monkeypatch.setattr(moe_fp8, "fused_moe_fp8", lambda *a, **k: moe_calls.append(1) or real_moe(*a, **k))
    kept = _llm(fp8_path, "keep")
    # every attention / dense-MLP projection but MLA's kv_b_proj (read as a matrix for the absorbed decode)
    fp8_layers = {n for n, m in kept.model.named_modules() if isinstance(m, LinearBase) and m.fp8_block is not None}
    assert kept.quantized_weights["kept"] > 0 and kept.quantized_weights["dequantized"] > 0
    assert any(n.endswith("o_proj") for n in fp8_layers) and any(n.endswith("gate_up_proj") for n in fp8_layers)
    assert not any(n.endswith("kv_b_proj") for n in fp8_layers)
    for n in fp8_layers:
        m = kept.model.get_submodule(n)
        assert m.weight.dtype == torch.float8_e4m3fn and m.weight_scale_inv.dtype == torch.float32
    # MoE experts (routed + the shared expert's slot) re-encoded after loading: the checkpoint's FP8 codes exactly
    from safetensors.torch import load_file

    from modelgen.runtime.layers.moe import FusedMoE

    raw = load_file(fp8_path / "model.safetensors")
    moe = [m for m in kept.model.modules() if isinstance(m, FusedMoE)]
    assert moe and kept.quantized_weights["moe_layers_fp8"] == len(moe)
    layer = kept.model.model.layers[1].mlp.experts
    assert layer.w13_weight.dtype == torch.float8_e4m3fn and layer.quant_method is not None
    I = layer.intermediate_size
    for e in range(layer.num_local_experts):
        for rows, name in ((slice(0, I), "gate_proj"), (slice(I, 2 * I), "up_proj")):
            want_q = raw[f"model.layers.1.mlp.experts.{e}.{name}.weight"]
            assert torch.equal(layer.w13_weight[e, rows].cpu().view(torch.uint8), want_q.view(torch.uint8)), (e, name)
        assert torch.equal(layer.w2_weight[e].cpu().view(torch.uint8),
                           raw[f"model.layers.1.mlp.experts.{e}.down_proj.weight"].view(torch.uint8))
    got = kept.score(PROMPT).float()
    assert calls, "the FP8 GEMM never ran"
    assert len(moe_calls) == len(moe), "the FP8 MoE kernel did not run once per MoE layer"
    deq = _llm(fp8_path, "dequantize")
    assert deq.quantized_weights["kept"] == 0
    assert all(m.fp8_block is None for m in deq.model.modules() if isinstance(m, LinearBase))
    assert_kept_matches_dequantized(kept, deq, got, PROMPT, PROMPT[:12], "FP8")


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


@pytest.mark.parametrize("T,E,k,S,ep", [(1, 8, 2, 1, False), (6, 8, 3, 0, True), (33, 4, 2, 2, False)])
@pytest.mark.parametrize("dtype", [torch.float32, "low"])
def test_fused_moe_fp8_matches_bf16_kernel_on_dequantized_experts(T, E, k, S, ep, dtype):
    """The FP8 MoE kernel against moe.py's kernel run on the dequantized experts (same align / combine / rounding
    steps): shared-expert slots, expert ranges, partial tiles (H = 96, I = 64 in 32 x 32 blocks)."""
    from modelgen.runtime.layers.fp8 import dequantize_block_fp8, quantize_block_fp8
    from modelgen.runtime.layers.moe.kernels import fused_moe
    from modelgen.runtime.layers.moe.kernels_fp8 import fused_moe_fp8
    from tests.gpu_helpers import LOW, rel

    dtype = LOW if dtype == "low" else dtype
    H, I, blk = 96, 64, (32, 32)
    g = torch.Generator().manual_seed(T + E)
    L = E // 2 if ep else E
    w13 = torch.randn(L + S, 2 * I, H, generator=g) * H ** -0.5
    w13[:, :5] *= 20  # blocks of very different ranges: a scale from the wrong block shows
    w2 = torch.randn(L + S, H, I, generator=g) * I ** -0.5
    q13, s13 = zip(*(quantize_block_fp8(w, blk) for w in w13))
    q2, s2 = zip(*(quantize_block_fp8(w, blk) for w in w2))
    q13, s13, q2, s2 = (torch.stack(t) for t in (q13, s13, q2, s2))
    d13 = torch.stack([dequantize_block_fp8(q, s, blk) for q, s in zip(q13, s13)])
    d2 = torch.stack([dequantize_block_fp8(q, s, blk) for q, s in zip(q2, s2)])
    x = torch.randn(T, H, generator=g).to(dtype).to(DEV)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).to(torch.int32).to(DEV)
    w = torch.softmax(torch.randn(T, k, generator=g), -1).to(DEV)
    offset = E // 2 if ep else 0
    got = fused_moe_fp8(x, q13.to(DEV), s13.to(DEV), q2.to(DEV), s2.to(DEV), w, ids, blk, expert_offset=offset,
                        num_local_experts=L, num_shared=S)
    want = fused_moe(x, d13.to(dtype).to(DEV), d2.to(dtype).to(DEV), w, ids, expert_offset=offset,
                     num_local_experts=L, num_shared=S)
    assert got.shape == (T, H) and got.dtype == dtype
    assert rel(got, want.float()) < (1e-5 if dtype == torch.float32 else 1e-2)


@cuda_only
def test_fp8_gemm_and_moe_replay_in_a_cuda_graph():
    """Decode steps replay captured graphs: the FP8 GEMM (split-K at M = 1) and the FP8 MoE capture (no host sync)
    and a replay on new inputs equals an eager call on them (DeepSeek-V3's o_proj and expert shapes, 128 blocks)."""
    from modelgen.runtime.layers.fp8 import quantize_block_fp8
    from modelgen.runtime.ops.gpu.fp8 import block_fp8_linear
    from modelgen.runtime.layers.moe.kernels_fp8 import fused_moe_fp8

    blk = (128, 128)
    g = torch.Generator(device="cuda").manual_seed(0)
    wq, ws = quantize_block_fp8(torch.randn(7168, 16384, device="cuda", generator=g) * 0.01, blk)
    E, H, I = 16, 7168, 2048
    q13, s13 = zip(*(quantize_block_fp8(torch.randn(2 * I, H, device="cuda", generator=g) * 0.01, blk)
                     for _ in range(E + 1)))
    q2, s2 = zip(*(quantize_block_fp8(torch.randn(H, I, device="cuda", generator=g) * 0.02, blk) for _ in range(E + 1)))
    q13, s13, q2, s2 = (torch.stack(t) for t in (q13, s13, q2, s2))

    def inputs():
        return (torch.randn(1, 16384, device="cuda", generator=g).bfloat16(),
                torch.randn(2, H, device="cuda", generator=g).bfloat16(),
                torch.stack([torch.randperm(E, device="cuda", generator=g)[:8] for _ in range(2)]).int(),
                torch.rand(2, 8, device="cuda", generator=g))

    assert_graph_replays_match_eager(
        lambda x, h, ids, w: (block_fp8_linear(x, wq, ws),
                              fused_moe_fp8(h, q13, s13, q2, s2, w, ids, blk, num_local_experts=E, num_shared=1)),
        inputs)
