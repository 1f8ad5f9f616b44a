"""GPU path of the rocm target: Triton kernels against the torch references, and the whole engine (CUDA graphs,
continuous batching) against transformers on the tiny parity configurations. Skipped without CUDA.

Kernel checks draw fresh random inputs, poison outputs/caches first where it matters, and compare by relative
error (bf16 within 1e-2, fp32 within 1e-5) against the references of ``runtime/ops``.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import torch

from tests.gpu_helpers import subprocess_env

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

PROMPT = [1, 17, 42, 99, 3, 150, 64, 8, 23, 77, 5, 130]
PROMPTS = [[1, 5, 9, 33], [1, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 12], [1, 99], [1, 40, 41, 42, 43, 44, 45]]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    assert torch.isfinite(a).all()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def tol(dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 1.2e-2


def _cache(nb, kvh, bs, d, dtype):
    return (torch.randn(nb, kvh, bs, d, device="cuda", dtype=dtype), torch.randn(nb, kvh, bs, d, device="cuda", dtype=dtype))


# ------------------------------------------------------------------------------------------------------------ kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("H,KVH,D,BS", [(32, 8, 128, 16), (4, 2, 16, 4), (4, 1, 32, 8), (6, 6, 64, 16)])
def test_decode_kernel(dtype, H, KVH, D, BS):
    from modelgen.runtime.layers.attention import ops as ref
    from modelgen.runtime.layers.attention import kernels as ga
    from modelgen.runtime.ops.rope import apply_rope, cos_sin_cache

    B, W, NB = 5, 40, 256
    kc, vc = _cache(NB, KVH, BS, D, dtype)
    ctx = torch.tensor([1, 7, BS * 3, BS * W - 3, 200], device="cuda").clamp(max=BS * W)
    tables = torch.randperm(NB, device="cuda")[: B * W].view(B, W).int()
    q = torch.randn(B, H, D, device="cuda", dtype=dtype)
    k, v = torch.randn(B, KVH, D, device="cuda", dtype=dtype), torch.randn(B, KVH, D, device="cuda", dtype=dtype)
    pos = ctx - 1
    slots = (tables.long().gather(1, (pos // BS)[:, None])[:, 0] * BS + pos % BS)
    kr, vr = kc.clone(), vc.clone()
    ref.write_paged_kv(k, v, kr, vr, slots)
    want = ref.paged_decode_attention(q, kr, vr, tables, ctx, D ** -0.5)
    for splits in (None, 1, 3, 16):
        k2, v2 = kc.clone(), vc.clone()
        got = ga.paged_decode(q, k, v, k2, v2, tables, ctx, slots, D ** -0.5, num_splits=splits)
        assert rel(got, want) < tol(dtype), splits
        assert torch.equal(k2, kr) and torch.equal(v2, vr)
    # fused RoPE: un-rotated q/k in, same result as rotating first
    cs = cos_sin_cache(D, 10000.0, None, 4096).cuda()
    qr, krot = apply_rope(q, cs, pos, D, "rotate_half"), apply_rope(k, cs, pos, D, "rotate_half")
    kr, vr = kc.clone(), vc.clone()
    ref.write_paged_kv(krot, v, kr, vr, slots)
    want = ref.paged_decode_attention(qr, kr, vr, tables, ctx, D ** -0.5)
    k2, v2 = kc.clone(), vc.clone()
    got = ga.paged_decode(q, k, v, k2, v2, tables, ctx, slots, D ** -0.5, rope=(pos, cs, D, False))
    assert rel(got, want) < 2 * tol(dtype)
    assert rel(k2, kr) < tol(dtype)
    # padding rows (slot -1, context 1) never touch the cache and stay finite
    k2, v2 = kc.clone(), vc.clone()
    got = ga.paged_decode(q, k, v, k2, v2, tables, torch.ones_like(ctx), torch.full_like(slots, -1), 0.1, num_splits=4)
    assert torch.equal(k2, kc) and torch.equal(v2, vc) and torch.isfinite(got.float()).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("H,KVH,D,BS", [(32, 8, 128, 16), (4, 2, 16, 4), (4, 1, 32, 8)])
def test_prefill_kernel(dtype, H, KVH, D, BS):
    from modelgen.runtime.layers.attention import ops as ref
    from modelgen.runtime.layers.attention import kernels as ga

    ns, ctxs = [300, 1, 17, 130], [300, 40, 90, 130]  # prefixes: 0, 39 (a decode row), 73, 0
    W = 300 // BS + 1
    NB = 4 * W + 8
    kc, vc = _cache(NB, KVH, BS, D, dtype)
    tables = torch.randperm(NB, device="cuda")[: 4 * W].view(4, W).int()
    cu = torch.tensor([0] + torch.tensor(ns).cumsum(0).tolist(), device="cuda", dtype=torch.int32)
    T = sum(ns)
    q = torch.randn(T, H, D, device="cuda", dtype=dtype)
    k, v = torch.randn(T, KVH, D, device="cuda", dtype=dtype), torch.randn(T, KVH, D, device="cuda", dtype=dtype)
    tl_ = tables.long().cpu()
    slots = torch.tensor([tl_[b, p // BS] * BS + p % BS for b in range(4) for p in range(ctxs[b] - ns[b], ctxs[b])],
                         device="cuda")
    kr, vr = kc.clone(), vc.clone()
    ref.write_paged_kv(k, v, kr, vr, slots)
    ctx_t = torch.tensor(ctxs, device="cuda", dtype=torch.int32)
    want = ref.paged_prefill_attention(q, kr, vr, cu, ctx_t, tables, D ** -0.5)
    k2, v2 = kc.clone(), vc.clone()
    ga.write_kv(k, v, k2, v2, slots)
    assert torch.equal(k2, kr) and torch.equal(v2, vr)
    got = ga.paged_prefill(q, k2, v2, cu, ctx_t, tables, D ** -0.5, max(ns))
    assert rel(got, want) < tol(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norm_rope_activation_kernels(dtype):
    from modelgen.runtime.ops import activation as ra, norm as rn, rope as rr
    from modelgen.runtime.ops.gpu import activation as ga, norm as gn, rope as gr

    x, r = torch.randn(7, 4096, device="cuda", dtype=dtype), torch.randn(7, 4096, device="cuda", dtype=dtype)
    w = torch.randn(4096, device="cuda", dtype=dtype)
    a, b = gn.add_rms_norm(x, r, w, 1e-5)
    a2, b2 = rn.add_rms_norm(x, r, w, 1e-5)
    assert torch.equal(b, b2) and rel(a, a2) < tol(dtype)
    assert rel(gn.rms_norm(x, w, 1e-5), rn.rms_norm(x, w, 1e-5)) < tol(dtype)
    g = torch.randn(5, 2 * 14336, device="cuda", dtype=dtype)
    assert rel(ga.gated(g), ra.silu_and_mul(g)) < tol(dtype)
    assert rel(ga.gated(g, "gelu_tanh"), ra.gelu_tanh_and_mul(g)) < tol(dtype)
    qkv = torch.randn(9, (32 + 16) * 128, device="cuda", dtype=dtype)
    q, k, _ = qkv.split([32 * 128, 8 * 128, 8 * 128], -1)
    q, k = q.view(9, 32, 128), k.view(9, 8, 128)
    pos = torch.randint(0, 4000, (9,), device="cuda")
    for style, rot in (("rotate_half", 128), ("pairwise", 128), ("rotate_half", 64)):
        cs = rr.cos_sin_cache(rot, 500000.0, None, 4096).cuda()
        qo, ko = gr.rope_qk(q, k, cs, pos, rot, style)
        assert rel(qo, rr.apply_rope(q, cs, pos, rot, style)) < tol(dtype)
        assert rel(ko, rr.apply_rope(k, cs, pos, rot, style)) < tol(dtype)


def test_split_k_gemv_and_choice():
    from modelgen.runtime.ops.gpu import linear as gl

    for N, K in ((4096, 4096), (6144, 4096), (4096, 14336), (1024, 512)):
        x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * 0.02
        b = torch.randn(N, device="cuda", dtype=torch.bfloat16)
        want = x.double() @ w.double().T + b.double()
        for _ in range(3):  # replays reuse the row-block counters, which each call leaves at zero
            assert rel(gl.gemv(x, w, b), want) < 1e-2
        assert int(gl._COUNTERS[(x.device, N)].abs().sum()) == 0
        assert rel(gl.linear(x, w, b), want) < 1e-2  # whichever implementation the timing picked


@pytest.mark.parametrize("M", [1, 3, 16, 40, 64])
def test_skinny_linear(M):
    from modelgen.runtime.ops.gpu.linear import skinny_linear

    for N, K in ((4096, 4096), (6144, 4096), (1000, 96)):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * 0.02
        b = torch.randn(N, device="cuda", dtype=torch.bfloat16)
        want = x.double() @ w.double().T + b.double()
        assert rel(skinny_linear(x, w, b), want) < 1e-2


# --------------------------------------------------------------------------------------------------------- engine
@pytest.mark.parametrize("name", ["gqa", "mha", "mqa", "tied", "llama3_rope", "bias", "head_dim"])
def test_against_hf_llama_fp32_on_gpu(llama_checkpoint, name):
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams
    from tests.test_parity_llama import PREFILL_ATOL, hf_greedy, hf_logits

    path, hf = llama_checkpoint(name)
    llm = LLM(path, target="rocm", dtype="float32", device="cuda", max_model_len=128)
    assert llm.backend == "triton" and llm.runner.graphs is not None
    got = llm.score(PROMPT).float().cpu()
    want = hf_logits(hf, PROMPT)
    assert (got - want).abs().max().item() < PREFILL_ATOL
    ref_tokens = hf_greedy(hf, PROMPT, 16)
    assert llm.generate([PROMPT], SamplingParams(max_new_tokens=16, ignore_eos=True))[0] == ref_tokens
    assert llm.runner.graphs.captures >= 1  # the decode steps replayed a CUDA graph


@pytest.mark.parametrize("name", ["gqa", "tied", "llama3_rope", "bias", "head_dim"])
def test_against_hf_llama_bf16_three_way_on_gpu(llama_checkpoint, name):
    from modelgen.runtime.engine.llm import LLM
    from tests.test_parity_llama import THREE_WAY_FACTOR, hf_logits

    path, hf = llama_checkpoint(name)
    gold = hf_logits(hf, PROMPT)
    hf_bf16 = copy.deepcopy(hf).to("cuda", torch.bfloat16)
    with torch.no_grad():
        floor_logits = hf_bf16(torch.tensor([PROMPT], device="cuda")).logits[0].float().cpu()
    llm = LLM(path, target="rocm", dtype="bfloat16", device="cuda", max_model_len=128)
    ours = llm.score(PROMPT).float().cpu()
    floor = (floor_logits - gold).abs().max().item()
    err = (ours - gold).abs().max().item()
    assert err <= THREE_WAY_FACTOR * floor + 1e-2, f"{name}: bf16 error {err:.4f} vs HF bf16 floor {floor:.4f}"
    top2 = gold.topk(2, dim=-1).values
    decisive = (top2[:, 0] - top2[:, 1]) > 4 * max(floor, err)
    assert torch.equal(ours.argmax(-1)[decisive], gold.argmax(-1)[decisive])


def test_graphs_equal_eager_and_batching_equals_singles(llama_checkpoint):
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams

    path, _ = llama_checkpoint("gqa")
    params = SamplingParams(max_new_tokens=10, ignore_eos=True)
    graphs = LLM(path, dtype="float32", device="cuda", max_model_len=64, block_size=4, max_num_seqs=4)
    eager = LLM(path, dtype="float32", device="cuda", max_model_len=64, block_size=4, max_num_seqs=4, cuda_graphs=False)
    single = LLM(path, dtype="float32", device="cuda", max_model_len=64, block_size=4, max_num_seqs=1)
    cpu = LLM(path, dtype="float32", device="cpu", max_model_len=64, block_size=4, max_num_seqs=4)
    together = graphs.generate(PROMPTS, params)
    assert together == eager.generate(PROMPTS, params)
    assert together == [single.generate([p], params)[0] for p in PROMPTS]
    assert together == cpu.generate(PROMPTS, params)
    # Decode logits of a graph step equal an eager recompute of the whole sequence.
    seq = PROMPTS[1] + together[1]
    for i in range(len(PROMPTS[1]), len(seq)):
        assert eager.score(seq[:i])[-1].argmax().item() == seq[i]


def test_continuous_batching_preempts_on_gpu(llama_checkpoint):
    from modelgen.runtime.block_manager import CacheFullError
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams

    path, _ = llama_checkpoint("gqa")
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    tight = LLM(path, dtype="float32", device="cuda", max_model_len=64, block_size=4, num_blocks=10, max_num_seqs=4)
    got = tight.generate(PROMPTS, params)
    single = LLM(path, dtype="float32", device="cuda", max_model_len=64, block_size=4, max_num_seqs=1)
    assert got == [single.generate([p], params)[0] for p in PROMPTS]
    assert tight.stats.preemptions > 0
    small = LLM(path, dtype="float32", device="cuda", max_model_len=64, block_size=4, num_blocks=3)
    with pytest.raises(CacheFullError, match="needs 5 KV blocks but the cache has only 3"):
        small.generate([list(range(1, 18))], SamplingParams(max_new_tokens=2))


def test_sampling_on_gpu_is_seeded(llama_checkpoint):
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams

    path, _ = llama_checkpoint("gqa")
    llm = LLM(path, dtype="bfloat16", device="cuda", max_model_len=64)
    p = SamplingParams(max_new_tokens=8, temperature=0.8, top_k=20, top_p=0.9, seed=3, ignore_eos=True)
    assert llm.generate([PROMPT, PROMPT], [p, p]) == llm.generate([PROMPT, PROMPT], [p, p])


def test_modelgen_run_device_cuda(llama_checkpoint):
    path, _ = llama_checkpoint("gqa")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, "-m", "modelgen.cli", "run", "--checkpoint", str(path), "--prompt-ids", "1,2,3",
         "--device", "cuda", "--max-new-tokens", "5", "--ignore-eos", "--json"],
        cwd=root, capture_output=True, text=True, timeout=300, env=subprocess_env(root),
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["backend"] == "triton" and len(out["outputs"][0]["token_ids"]) == 5


def test_sharded_checkpoint_loads_to_gpu_like_cpu(llama_checkpoint, tmp_path):
    """The GPU read-ahead loader (parallel reads, pinned buffers, async copies) fills every parameter exactly as the
    CPU (mmap) path does, across several shards."""
    from modelgen.runtime.engine.llm import LLM

    _, hf = llama_checkpoint("bias")
    hf.save_pretrained(tmp_path, max_shard_size="40KB")
    assert len(list(tmp_path.glob("*.safetensors"))) > 2
    gpu = LLM(tmp_path, dtype="float32", device="cuda", max_model_len=64)
    cpu = LLM(tmp_path, dtype="float32", device="cpu", max_model_len=64)
    want = dict(cpu.model.named_parameters())
    for name, p in gpu.model.named_parameters():
        assert torch.equal(p.cpu(), want[name]), name


# ----------------------------------------------------------------------------------------- other architectures
@pytest.mark.parametrize("name", ["qwen3", "qwen3_moe_norm", "mixtral", "glm4_moe_qknorm", "glm4_moe_plain"])
def test_against_hf_other_architectures_on_gpu(tmp_path, name):
    """Qwen3 (QK norm), MoE blocks (sorted fused MoE in prefill, the capture-safe dense path in graphed decode) and
    GLM4's partial RoPE through the GPU kernels: fp32 prefill logits and 16 greedy tokens equal transformers."""
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams
    from tests.moe_fixtures import make_moe
    from tests.test_parity_llama import PREFILL_ATOL, hf_greedy, hf_logits

    hf = make_moe(tmp_path, name)
    llm = LLM(tmp_path, target="rocm", dtype="float32", device="cuda", max_model_len=128)
    assert (llm.score(PROMPT).float().cpu() - hf_logits(hf, PROMPT)).abs().max().item() < PREFILL_ATOL
    assert llm.generate([PROMPT], SamplingParams(max_new_tokens=16, ignore_eos=True))[0] == hf_greedy(hf, PROMPT, 16)
