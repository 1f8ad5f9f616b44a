"""GPT-OSS's bf16 experts on the GPU path: the Triton MoE of ``runtime/layers/moe/kernels.py`` with per-expert biases
(``w13_bias [E, 2I]`` gate columns then up columns, ``w2_bias [E, H]``) and the clamped SwiGLU, against the torch
reference of ``runtime/layers/moe/ops.py`` (sorted and small-batch pair paths, both pair-path down kernels,
expert-parallel ranges), and a tiny gpt-oss through the engine against transformers.

Runs on a CUDA GPU, or on the CPU through Triton's interpreter (``TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1``).
Tolerances as tests/test_gpu_moe.py: fp32 differs from the reference only by summation order (1e-5 relative); 16-bit
dtypes round gate/up, each activation step and the expert output alike, and a rounding on the other side of a tie
moves a value by one ulp, hence 1e-2.
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu_helpers import DEV, KERNEL_MARKS, LOW, rel

pytestmark = KERNEL_MARKS

ALPHA = 1.702


def _case(T, E, k, H, I, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(E, 2 * I, H, generator=g) * H ** -0.5
    w2 = torch.randn(E, H, I, generator=g) * I ** -0.5
    b13 = torch.randn(E, 2 * I, generator=g) * 0.5
    b2 = torch.randn(E, H, generator=g) * 0.1
    x = torch.randn(T, H, generator=g) * 2  # gate/up of a few units: the clamps below bind on many columns
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).to(torch.int32)
    w = torch.softmax(torch.randn(T, k, generator=g), -1)
    return [t.to(dtype) for t in (x, w13, w2, b13, b2)] + [w, ids]


def _reference(x, w13, w2, b13, b2, w, ids, limit, **kw):
    from modelgen.runtime.ops.activation import gated_activation
    from modelgen.runtime.layers.moe.ops import fused_moe

    act = gated_activation("clamped_swiglu", {"alpha": ALPHA, "limit": limit})
    return fused_moe(x, w13, w2, w, ids.long(), act, accumulate="sum", w13_bias=b13, w2_bias=b2, **kw)


def _configs():
    from modelgen.runtime.layers.moe import kernels as gm

    sorted_cfg = dict(BLOCK_M=16, up=(32, 32, 4, 2), down=(32, 32, 4, 2))
    return {"sorted": sorted_cfg, "pairs": dict(gm._PAIRS),
            **{f"slots{i}": c for i, c in enumerate(gm._PAIR_CANDIDATES) if c.get("down_slots")}}


# (tokens, experts, top-k, hidden, intermediate, expert parallel: this "rank" holds experts [E/2, E))
CASES = [(1, 4, 2, 64, 64, False), (3, 8, 4, 96, 48, False), (9, 8, 2, 64, 32, False), (3, 8, 4, 96, 48, True)]


@pytest.mark.parametrize("T,E,k,H,I,ep", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
@pytest.mark.parametrize("path", ["sorted", "pairs", "slots"])
def test_bias_and_clamped_swiglu_match_the_reference(T, E, k, H, I, ep, dtype, path):
    from modelgen.runtime.layers.moe import kernels as gm

    limit = 1.0  # well inside gate/up's range: both clamps bind (GPT-OSS's 7.0 rarely does at these sizes)
    x, w13, w2, b13, b2, w, ids = _case(T, E, k, H, I, dtype, seed=T * 31 + E + H)
    lo, L = (E // 2, E // 2) if ep else (0, E)
    sl = slice(lo, lo + L)
    want = _reference(x, w13[sl], w2[sl], b13[sl], b2[sl], w, ids, limit, expert_offset=lo, num_local_experts=L,
                      global_num_experts=E)
    cfgs = [c for n, c in _configs().items() if n.startswith(path)]
    assert cfgs
    on = lambda t: t.to(DEV)  # noqa: E731
    for cfg in cfgs:
        got = gm.fused_moe(on(x), on(w13[sl]), on(w2[sl]), on(w), on(ids), "clamped_swiglu", expert_offset=lo,
                           num_local_experts=L, config=cfg, w13_bias=on(b13[sl]), w2_bias=on(b2[sl]), alpha=ALPHA,
                           limit=limit)
        assert got.shape == (T, H) and got.dtype == dtype
        assert rel(got.cpu(), want) < (1e-5 if dtype == torch.float32 else 1e-2), cfg
    # the biases and the clamp are live: dropping the down bias or the clamp moves the result far past the bound
    no_b2 = gm.fused_moe(on(x), on(w13[sl]), on(w2[sl]), on(w), on(ids), "clamped_swiglu", expert_offset=lo,
                         num_local_experts=L, config=cfgs[0], w13_bias=on(b13[sl]), alpha=ALPHA, limit=limit)
    unclamped = gm.fused_moe(on(x), on(w13[sl]), on(w2[sl]), on(w), on(ids), "clamped_swiglu", expert_offset=lo,
                             num_local_experts=L, config=cfgs[0], w13_bias=on(b13[sl]), w2_bias=on(b2[sl]),
                             alpha=ALPHA, limit=100.0)
    assert rel(no_b2.cpu(), want) > 0.05 and rel(unclamped.cpu(), want) > 0.05


def test_engine_gpt_oss_bf16_experts_take_the_kernels(tmp_path, monkeypatch):
    """A tiny gpt-oss (bf16-style fused experts, no MXFP4) on the GPU path: every MoE layer runs the Triton MoE (not
    the torch reference) and so does the router, fp32 prefill logits within 1e-4 of transformers and 8 greedy tokens equal."""
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams
    from modelgen.runtime.layers.moe import FusedMoE
    from modelgen.runtime.layers.moe import kernels as gm
    from tests.gpt_oss_fixtures import PROMPT, make_gpt_oss
    from tests.test_parity_llama import hf_greedy, hf_logits

    calls, routes = [], []
    real, real_route = gm.fused_moe, gm.route
    monkeypatch.setattr(gm, "fused_moe",
                        lambda *a, **kw: calls.append(kw.get("w13_bias") is not None) or real(*a, **kw))
    monkeypatch.setattr(gm, "route", lambda *a, **kw: routes.append(kw["scoring"]) or real_route(*a, **kw))
    hf = make_gpt_oss(tmp_path)
    llm = LLM(tmp_path, target="rocm", dtype=torch.float32, device=DEV, max_model_len=128, cuda_graphs=False)
    layers = [m for m in llm.model.modules() if isinstance(m, FusedMoE)]
    assert layers and all(m.quant_method is None and m.w13_bias is not None for m in layers)
    err = (llm.score(PROMPT).float().cpu() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < 1e-4, f"gpt-oss logits differ from transformers by {err}"
    assert len(calls) == len(layers) and all(calls), "the Triton MoE did not run once per MoE layer with its biases"
    assert routes == ["topk_softmax"] * len(layers), "the router (linear bias, top-k then softmax) skipped the kernel"
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    assert llm.generate([PROMPT[:10]], params)[0] == hf_greedy(hf, PROMPT[:10], 8)
