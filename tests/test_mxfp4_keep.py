"""MXFP4 experts kept as released on the GPU path: ``runtime/layers/moe/kernels_mxfp4.py`` (uint8 codes + E8M0 scales
expanded in registers) against the torch reference on the dequantized experts, and the engine on a tiny gpt-oss MXFP4
checkpoint with ``quantized_weights="keep"`` against ``"dequantize"``.

Runs on a CUDA GPU, or on the CPU through Triton's interpreter (``TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1``).
Tolerances: the widened codes equal the dequantized weights exactly (FP4 values times powers of two), so in float32
the kernel and the reference differ only by summation order (1e-5 relative); in 16-bit dtypes both round gate/up, each
activation step and the expert output to the model dtype, and a rounding that lands on the other side of a tie moves
a value by one ulp (2^-8 relative in bf16), hence 1e-2.
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu_helpers import (DEV, KERNEL_MARKS, LOW, assert_graph_replays_match_eager,
                                assert_kept_matches_dequantized, cuda_only, rel)

pytestmark = KERNEL_MARKS


def _experts(E, H, I, seed):
    """gpt-oss's fused tensors (``gate_up_proj [E, H, 2I]`` gate/up interleaved, ``down_proj [E, I, H]``) as MXFP4,
    plus the stacked dequantized weights and biases the reference takes."""
    from modelgen.runtime.ops.mxfp4 import dequantize_mxfp4, quantize_mxfp4
    from modelgen.runtime.layers.moe.ops import stacked_from_fused

    g = torch.Generator().manual_seed(seed)
    gate_up = torch.randn(E, H, 2 * I, generator=g) * H ** -0.5
    gate_up[:, :, :6] *= 8  # some groups far larger than others: a scale applied to the wrong group shows
    down = torch.randn(E, I, H, generator=g) * I ** -0.5
    (b13, s13), (b2, s2) = quantize_mxfp4(gate_up), quantize_mxfp4(down)
    w13 = stacked_from_fused(dequantize_mxfp4(b13, s13, torch.float32), "w13", "interleaved_transposed")
    w2 = stacked_from_fused(dequantize_mxfp4(b2, s2, torch.float32), "w2", "interleaved_transposed")
    bias13 = torch.randn(E, 2 * I, generator=g) * 0.5  # stacked: gate columns, then up columns
    bias2 = torch.randn(E, H, generator=g) * 0.1
    return (b13, s13, b2, s2), (w13, w2), (bias13, bias2)


# (tokens, experts, top-k, hidden, intermediate, expert parallel: this "rank" holds half the experts)
CASES = [(1, 4, 2, 64, 64, False), (5, 8, 4, 96, 64, False), (40, 4, 2, 64, 96, False), (5, 8, 4, 96, 64, True)]


@pytest.mark.parametrize("T,E,k,H,I,ep", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
@pytest.mark.parametrize("activation", ["clamped_swiglu", "silu"])
def test_fused_moe_mxfp4_matches_dequantized_reference(T, E, k, H, I, ep, dtype, activation):
    import functools

    from modelgen.runtime.ops.activation import gated_activation
    from modelgen.runtime.layers.moe.kernels_mxfp4 import fused_moe_mxfp4
    from modelgen.runtime.layers.moe.ops import fused_moe

    (b13, s13, b2, s2), (w13, w2), (bias13, bias2) = _experts(E, H, I, seed=T + E + H)
    g = torch.Generator().manual_seed(T)
    x = (torch.randn(T, H, generator=g) * 2).to(dtype)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).to(torch.int32)
    w = torch.softmax(torch.randn(T, k, generator=g), -1)
    params = {"alpha": 1.702, "limit": 7.0} if activation == "clamped_swiglu" else None
    act = gated_activation(activation, params)
    lo, L = (E // 2, E // 2) if ep else (0, E)  # this "rank" holds experts [lo, lo + L)
    sl = slice(lo, lo + L)
    want = fused_moe(x, w13[sl].to(dtype), w2[sl].to(dtype), w, ids.long(), act,
                     expert_offset=lo, num_local_experts=L, accumulate="sum", global_num_experts=E,
                     w13_bias=bias13[sl].to(dtype), w2_bias=bias2[sl].to(dtype))
    on = functools.partial(torch.Tensor.to, device=DEV)
    got = fused_moe_mxfp4(on(x), on(b13[sl]), on(s13[sl]), on(b2[sl]), on(s2[sl]), on(w), on(ids),
                          activation=activation, alpha=1.702, limit=7.0, w13_bias=on(bias13[sl].to(dtype)),
                          w2_bias=on(bias2[sl].to(dtype)), expert_offset=lo)
    assert got.shape == (T, H) and got.dtype == dtype
    assert rel(got.cpu(), want) < (1e-5 if dtype == torch.float32 else 1e-2)
    if ep:  # the other half of the experts adds the rest: both halves sum to the whole layer
        other = fused_moe_mxfp4(on(x), on(b13[:lo]), on(s13[:lo]), on(b2[:lo]), on(s2[:lo]), on(w), on(ids),
                                activation=activation, w13_bias=on(bias13[:lo].to(dtype)),
                                w2_bias=on(bias2[:lo].to(dtype)), expert_offset=0)
        whole = fused_moe(x, w13.to(dtype), w2.to(dtype), w, ids.long(), act, accumulate="sum",
                          w13_bias=bias13.to(dtype), w2_bias=bias2.to(dtype))
        assert rel((got.float() + other.float()).cpu(), whole) < (1e-5 if dtype == torch.float32 else 2e-2)


def test_fp4_decode_every_code_and_scale():
    """All 16 codes x a range of exponents, one row each: the kernel's bit construction equals the E2M1 table."""
    from modelgen.runtime.ops.mxfp4 import FP4_VALUES
    from modelgen.runtime.layers.moe.kernels_mxfp4 import fused_moe_mxfp4

    # a down projection of identity-like input: expert output row h = sum_i a_i * W[h, i]; with gate/up chosen so
    # inter = one-hot(i), y[h] = W[h, i] exactly (fp32)
    E, H, I = 1, 64, 64
    codes = torch.arange(256, dtype=torch.uint8).view(16, 16)  # every (low, high) pair
    b2 = codes.repeat(H // 16 * 2, 1)[:H].reshape(1, H, 1, 16).repeat(1, 1, I // 32, 1).contiguous()
    # exponents around 127 and far from it (2^-117 .. 2^73; subnormal products are left out: a GPU may flush them)
    s2 = torch.tensor([120, 121, 122, 123, 124, 125, 126, 127, 128, 10, 60, 200] * 6)[:H]
    s2 = s2.to(torch.uint8).view(1, H, 1).repeat(1, 1, I // 32).contiguous()
    lut = torch.tensor(FP4_VALUES)
    want_w = torch.empty(H, I)
    byte = b2[0].reshape(H, -1).long()
    want_w[:, 0::2] = lut[byte & 15]
    want_w[:, 1::2] = lut[byte >> 4]
    want_w *= torch.pow(2.0, s2[0].float().repeat_interleave(32, 1) - 127)
    # gate-up of zero codes: inter = silu(60) * one_hot(i) from the biases alone; silu(60) = 60 exactly in float32
    # (e^-60 vanishes next to 1), so y[h] = 60 * W[h, i], exact (60 * fp4 * 2^k has at most 6 significant bits)
    b13 = torch.zeros(E, 2 * I, H // 32, 16, dtype=torch.uint8)
    s13 = torch.full((E, 2 * I, H // 32), 127, dtype=torch.uint8)
    for i in (0, 1, 37):
        bias13 = torch.cat([torch.full((I,), 60.0), torch.nn.functional.one_hot(torch.tensor(i), I).float()])[None]
        y = fused_moe_mxfp4(torch.zeros(1, H, device=DEV), b13.to(DEV), s13.to(DEV), b2.to(DEV), s2.to(DEV),
                            torch.ones(1, 1, device=DEV), torch.zeros(1, 1, dtype=torch.int32, device=DEV),
                            activation="silu", w13_bias=bias13.to(DEV))
        assert torch.equal(y[0].cpu(), 60 * want_w[:, i]), i


@pytest.fixture(scope="module")
def mxfp4_path(tmp_path_factory):
    from tests.gpt_oss_fixtures import make_gpt_oss
    from tests.test_mxfp4 import _write_mxfp4

    root = tmp_path_factory.mktemp("mxfp4_keep")
    make_gpt_oss(root / "plain", intermediate_size=32)  # the expert widths must be multiples of 32
    _write_mxfp4(root / "plain", root / "mxfp4")
    return root / "mxfp4"


def _llm(path, mode, dtype=torch.float32):
    from modelgen.runtime.engine.llm import LLM

    return LLM(path, target="rocm", dtype=dtype, device=DEV, max_model_len=128, quantized_weights=mode,
               cuda_graphs=False)


def test_gpt_oss_mxfp4_kept_equals_dequantized(mxfp4_path, monkeypatch):
    """fp32: logits within 1e-4 (summation order only, see the module docstring) and 8 greedy tokens equal."""
    from modelgen.runtime.layers.moe import FusedMoE
    from modelgen.runtime.layers.moe import kernels_mxfp4 as moe_mxfp4
    from tests.gpt_oss_fixtures import PROMPT

    calls = []
    real = moe_mxfp4.fused_moe_mxfp4
    monkeypatch.setattr(moe_mxfp4, "fused_moe_mxfp4", lambda *a, **k: calls.append(1) or real(*a, **k))
    kept = _llm(mxfp4_path, "keep")
    layers = [m for m in kept.model.modules() if isinstance(m, FusedMoE)]
    assert layers and all(m.quant_method is not None and m.gate_up_proj_blocks.dtype == torch.uint8
                          and not hasattr(m, "w13_weight") for m in layers)
    assert kept.quantized_weights["kept"] == 2 * len(layers) and kept.quantized_weights["dequantized"] == 0
    got = kept.score(PROMPT).float()
    assert len(calls) == len(layers), "the MXFP4 kernel did not run once per MoE layer"
    deq = _llm(mxfp4_path, "dequantize")
    assert all(m.quant_method is None for m in deq.model.modules() if isinstance(m, FusedMoE))
    assert_kept_matches_dequantized(kept, deq, got, PROMPT, PROMPT[:10], "MXFP4")


def test_mxfp4_keep_torch_backend_after_loading(mxfp4_path, monkeypatch):
    """A kept model run with the torch backend forced afterwards (the reference on experts dequantized per call)
    gives the kernel path's logits."""
    from modelgen.runtime.ops import gpu
    from tests.gpt_oss_fixtures import PROMPT

    kept = _llm(mxfp4_path, "keep")
    got = kept.score(PROMPT[:12]).float()
    monkeypatch.setenv("MODELGEN_BACKEND", "torch")
    gpu.refresh()
    try:
        ref = kept.score(PROMPT[:12]).float()
    finally:
        monkeypatch.delenv("MODELGEN_BACKEND")
        gpu.refresh()
    assert (got - ref).abs().max().item() < 1e-4


@cuda_only
def test_mxfp4_moe_replays_in_a_cuda_graph():
    """Decode steps replay captured graphs: the kernel captures (no host sync) and a replay on new tokens and routing
    equals an eager call on them, at gpt-oss-20b's widths (H = I = 2880: partial K tiles)."""
    from modelgen.runtime.layers.moe.kernels_mxfp4 import fused_moe_mxfp4

    (b13, s13, b2, s2), _, (bias13, bias2) = _experts(4, 2880, 2880, seed=3)  # 4 experts: a quick host quantizer
    on = lambda t: t.cuda()  # noqa: E731
    b13, s13, b2, s2 = on(b13), on(s13), on(b2), on(s2)
    bias13, bias2 = on(bias13).bfloat16(), on(bias2).bfloat16()
    g = torch.Generator(device="cuda").manual_seed(0)

    def inputs():
        x = torch.randn(2, 2880, device="cuda", generator=g).bfloat16()
        ids = torch.stack([torch.randperm(4, device="cuda", generator=g)[:2] for _ in range(2)]).int()
        return x, ids, torch.rand(2, 2, device="cuda", generator=g).softmax(-1)

    assert_graph_replays_match_eager(
        lambda x, ids, w: fused_moe_mxfp4(x, b13, s13, b2, s2, w, ids, w13_bias=bias13, w2_bias=bias2), inputs)
