"""Fused MoE on the GPU (``runtime/layers/moe/kernels.py``) against the torch references of
``runtime/layers/moe/ops.py``, and the engine's MoE models against transformers with those kernels in prefill and in
graphed decode. The kernel tests also run in Triton's interpreter (``TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1``, CPU
tensors, float16 for bfloat16, the largest token counts left out); CUDA graphs and the engine need a GPU.

Every check draws fresh random inputs; kernel outputs are compared by relative error with a float64 evaluation of
the reference (16-bit operands: within 1e-2; fp32: 1e-5), so a wrong row, slot or weight shows at any size.
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu_helpers import DEV, INTERPRET, KERNEL_MARKS, LOW, count_calls, cuda_only, rel

pytestmark = KERNEL_MARKS


def sizes(*values: int, interpreter_max: int = 64) -> list[int]:
    """Token counts of a test: all on a GPU, the interpreter's share (it runs each program in numpy) otherwise."""
    return [v for v in values if not INTERPRET or torch.cuda.is_available() or v <= interpreter_max]


def tol(dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 1e-2


def experts(E: int, H: int, I: int, dtype, seed: int):
    g = torch.Generator(device=DEV).manual_seed(seed)
    w13 = (torch.randn(E, 2 * I, H, device=DEV, generator=g) * H ** -0.5).to(dtype)
    w2 = (torch.randn(E, H, I, device=DEV, generator=g) * I ** -0.5).to(dtype)
    return w13, w2


def routing(T: int, E: int, k: int, seed: int, dtype=torch.float32):
    g = torch.Generator(device=DEV).manual_seed(seed)
    ids = torch.rand(T, E, device=DEV, generator=g).argsort(dim=1)[:, :k].int()  # k distinct experts per token
    w = torch.rand(T, k, device=DEV, generator=g).to(dtype)
    return w, ids


def reference(hidden, w13, w2, w, ids, **kw) -> torch.Tensor:
    """The torch reference evaluated in float64 (the truth the bf16 kernel is measured against)."""
    from modelgen.runtime.layers.moe import ops as ref

    return ref.fused_moe(hidden.double(), w13.double(), w2.double(), w.double(), ids.long(), accumulate="sum", **kw)


# ------------------------------------------------------------------------------------------------------------ router
@pytest.mark.parametrize("T", sizes(1, 7, 64, 300))
@pytest.mark.parametrize("E,k", [(8, 2), (64, 8), (128, 8)])
@pytest.mark.parametrize("renormalize", [True, False])
def test_softmax_route(T, E, k, renormalize):
    from modelgen.runtime.layers.moe import ops as ref
    from modelgen.runtime.layers.moe import kernels as gm

    logits = torch.randn(T, E, device=DEV, dtype=LOW) * 2
    w, ids = gm.route(logits, k, scoring="softmax", renormalize=renormalize)
    w2, ids2 = ref.route(logits, k, scoring="softmax", renormalize=renormalize)
    # Both in descending-score order. bf16 logits tie often (8-bit mantissa): the tied experts may come in another
    # order or, at the k-th place, another of the tied experts be chosen; their probabilities are the same.
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    assert ids.dtype == torch.int32 and torch.equal(probs.gather(1, ids.long()), probs.gather(1, ids2))
    untied = (probs.unsqueeze(-1) == probs.gather(1, ids2).unsqueeze(1)).sum(1) == 1  # [T, k]: value unique in row
    assert torch.equal(ids.long()[untied], ids2[untied])
    assert rel(w, w2) < 1e-6
    wb, _ = gm.route(logits, k, scoring="softmax", renormalize=renormalize, out_dtype=LOW)
    assert wb.dtype == LOW and rel(wb, w2) < 4e-3  # Qwen3-MoE's cast (one 16-bit rounding)


@pytest.mark.parametrize("T", sizes(1, 9, 300))
@pytest.mark.parametrize("E,k,n_group,topk_group", [(8, 2, 2, 1), (64, 8, 8, 4), (256, 8, 8, 4), (16, 4, None, None)])
@pytest.mark.parametrize("bias", [True, False])
def test_sigmoid_grouped_route(T, E, k, n_group, topk_group, bias):
    from modelgen.runtime.layers.moe import ops as ref
    from modelgen.runtime.layers.moe import kernels as gm

    logits = torch.randn(T, E, device=DEV, dtype=torch.float32)
    b = torch.randn(E, device=DEV) * 0.5 if bias else None
    kw = dict(scoring="sigmoid", renormalize=True, n_group=n_group, topk_group=topk_group, e_score_correction_bias=b,
              routed_scaling_factor=2.5)
    w, ids = gm.route(logits, k, **kw)
    w2, ids2 = ref.route(logits, k, **kw)
    # The reference picks with topk(sorted=False), as HF does: compare the chosen sets and their weights.
    a, a2 = ids.long().sort(dim=1), ids2.sort(dim=1)
    assert torch.equal(a.values, a2.values)
    assert rel(w.gather(1, a.indices), w2.gather(1, a2.indices)) < 1e-6


@pytest.mark.parametrize("T", sizes(1, 7, 300))
@pytest.mark.parametrize("E,k", [(32, 4), (128, 4), (8, 2)])
@pytest.mark.parametrize("dtype", [LOW, torch.float32])
def test_topk_softmax_route(T, E, k, dtype):
    """GPT-OSS / granitemoe: top-k of the raw logits, softmax over the k in the logits' dtype, then float32."""
    from modelgen.runtime.layers.moe import ops as ref
    from modelgen.runtime.layers.moe import kernels as gm

    logits = (torch.randn(T, E, device=DEV) * 2).to(dtype)
    w, ids = gm.route(logits, k, scoring="topk_softmax", renormalize=False)
    w2, ids2 = ref.route(logits, k, scoring="topk_softmax", renormalize=False)
    # Descending order both; 16-bit logits tie: the tied experts' logits (and so their weights) are equal.
    assert ids.dtype == torch.int32 and w.dtype == torch.float32
    assert torch.equal(logits.gather(1, ids.long()), logits.gather(1, ids2))
    untied = (logits.unsqueeze(-1) == logits.gather(1, ids2).unsqueeze(1)).sum(1) == 1
    assert torch.equal(ids.long()[untied], ids2[untied])
    assert rel(w, w2) < (1e-6 if dtype == torch.float32 else 4e-3)  # one 16-bit rounding of the softmax
    w3, _ = gm.route(logits, k, scoring="topk_softmax", renormalize=True)  # renormalize changes nothing
    assert torch.equal(w3, w)


@pytest.mark.parametrize("T", [1, 5])
def test_router_linear_bias_topk_softmax(T):
    """GPT-OSS's router: F.linear with the router's own bias, then top-k-then-softmax (TopKRouter on the kernel)."""
    from modelgen.runtime.layers.moe import ops as ref
    from modelgen.runtime.layers.moe import kernels as gm
    from modelgen.runtime.layers.linear import linear
    from modelgen.runtime.layers.moe.layer import TopKRouter

    H, E, k = 256, 32, 4
    r = TopKRouter(H, E, top_k=k, scoring="topk_softmax", renormalize=False, bias=True).to(DEV, LOW)
    torch.nn.init.normal_(r.weight, std=0.05)
    torch.nn.init.normal_(r.bias, std=0.5)
    x = torch.randn(T, H, device=DEV, dtype=LOW)
    assert r._gpu(x)
    w, ids = r(x)
    logits = linear(x, r.weight, r.bias)
    w2, ids2 = ref.route(logits, k, scoring="topk_softmax", renormalize=False)
    assert torch.equal(logits.gather(1, ids.long()), logits.gather(1, ids2))
    assert rel(w, w2) < 4e-3
    w3, ids3 = gm.router(x, r.weight, k, scoring="topk_softmax", renormalize=False, bias=r.bias, gemm=linear)
    assert torch.equal(ids3, ids.int()) and torch.equal(w3, w)


@pytest.mark.parametrize("T", [1, 2, 3])  # 1, 2: router GEMM + top-k in one launch; 3: GEMM then the top-k kernel
def test_router_gemm_and_topk(T, monkeypatch):
    from modelgen.runtime.layers.moe import ops as ref
    from modelgen.runtime.layers.moe import kernels as gm

    monkeypatch.setattr(gm, "FUSED_ROUTER_T", 2)  # off by default (slower at Qwen3's shape), tested all the same

    H = 2048
    # Qwen3-MoE: bf16 logits (rounded as F.linear rounds them), softmax, top-8, weights cast to bf16.
    x = torch.randn(T, H, device=DEV, dtype=LOW)
    W = torch.randn(128, H, device=DEV, dtype=LOW) * 0.02
    for _ in range(2):  # the second call reuses the arrival counter the first one reset
        w, ids = gm.router(x, W, 8, scoring="softmax", renormalize=True, out_dtype=LOW)
    probs = torch.softmax(torch.nn.functional.linear(x, W), dim=-1, dtype=torch.float32)
    kth = probs.topk(8, dim=-1).values[:, -1:]
    chosen = probs.gather(1, ids.long())
    assert (chosen >= kth * (1 - 1e-2)).all()  # bf16 logits may round differently only at near-ties
    assert rel(w, chosen / chosen.sum(-1, keepdim=True)) < 1e-2
    # GLM4-MoE / DeepSeek-V3: float32 router, sigmoid, correction bias, 8 groups keep 4: ids exact.
    xf, Wf = x.float(), W.float()
    bias = torch.randn(128, device=DEV) * 0.1
    kw = dict(scoring="sigmoid", renormalize=True, n_group=8, topk_group=4, e_score_correction_bias=bias,
              routed_scaling_factor=2.5)
    w, ids = gm.router(xf, Wf, 8, **kw)
    w2, ids2 = ref.route(torch.nn.functional.linear(xf, Wf), 8, **kw)
    a, a2 = ids.long().sort(dim=1), ids2.sort(dim=1)
    assert torch.equal(a.values, a2.values)
    assert rel(w.gather(1, a.indices), w2.gather(1, a2.indices)) < 1e-5
    assert all(int(c.abs().sum()) == 0 for c in gm._COUNTERS.values())


@pytest.mark.parametrize("T,E,k,S,L,offset", [(1, 32, 4, 0, 32, 0), (32, 512, 10, 0, 512, 0), (7, 64, 8, 1, 32, 16),
                                                (64, 8, 2, 0, 8, 0)])
@pytest.mark.parametrize("BM", [16, 64])
def test_align_blocks(T, E, k, S, L, offset, BM):
    """``align``: each local slot's pairs padded to whole ``BM`` blocks in ascending slot order (each expert writes
    its own blocks), -1 past the padded count, the pairs of a block exactly that slot's; T=64: many blocks for one."""
    from modelgen.runtime.layers.moe import kernels as gm

    _, ids = routing(T, E, k, seed=T + E + BM)
    if T == 64:
        ids[:, 0], ids[:, 1] = 3, 5  # two experts take every token
    P, KT = T * (k + S), k + S
    sorted_ids, expert_ids, npost, nb = gm.align(ids, P, KT, k, offset, L, S, BM)
    local = ids.long() - offset
    slot = torch.cat([torch.where((local >= 0) & (local < L), local, -1),
                      torch.arange(L, L + S).expand(T, S).to(local)], 1).reshape(-1)  # [P]: -1 = other rank
    counts = torch.bincount(slot[slot >= 0], minlength=L + S)
    want = torch.cat([torch.full((int(-(-c // BM)),), e, dtype=torch.int32) for e, c in enumerate(counts.tolist())])
    n = int(npost)
    assert n == len(want) * BM
    assert torch.equal(expert_ids.cpu()[: len(want)], want) and (expert_ids[len(want):] == -1).all()
    rows = sorted_ids.long().cpu()
    for b, e in enumerate(want.tolist()):
        got = rows[b * BM:(b + 1) * BM]
        got = got[got < P]
        assert (slot.cpu()[got] == e).all()
    assert sorted(rows[rows < P].tolist()) == (slot >= 0).nonzero().flatten().cpu().tolist()


# ------------------------------------------------------------------------------------------------------------ experts
@pytest.mark.parametrize("T", sizes(1, 7, 64, 300, interpreter_max=7))
@pytest.mark.parametrize("E,k", [(8, 2), (64, 8), (128, 8)])
def test_fused_moe_bf16(T, E, k):
    from modelgen.runtime.layers.moe import kernels as gm

    H, I = 256, 96  # I not a multiple of the column blocks: masked edges
    w13, w2 = experts(E, H, I, LOW, seed=T * 1000 + E)
    hidden = torch.randn(T, H, device=DEV, dtype=LOW)
    for wdtype in (torch.float32, LOW):  # Mixtral/GLM keep float32 weights, Qwen3-MoE casts to the model dtype
        w, ids = routing(T, E, k, seed=T + E + k, dtype=wdtype)
        got = gm.fused_moe(hidden, w13, w2, w, ids)
        assert got.shape == (T, 256) and got.dtype == LOW
        assert rel(got, reference(hidden, w13, w2, w, ids)) < tol(LOW)


@pytest.mark.parametrize("T", sizes(1, 64, 300, interpreter_max=8))
def test_fused_moe_fp32_and_gelu(T):
    from modelgen.runtime.layers.moe import ops as ref
    from modelgen.runtime.layers.moe import kernels as gm

    E, k, H, I = 16, 4, 128, 64
    w13, w2 = experts(E, H, I, torch.float32, seed=T)
    hidden = torch.randn(T, H, device=DEV)
    w, ids = routing(T, E, k, seed=T)
    for act in ("silu", "gelu_tanh"):
        got = gm.fused_moe(hidden, w13, w2, w, ids, act)
        want = ref.fused_moe(hidden.double(), w13.double(), w2.double(), w.double(), ids.long(), act, accumulate="sum")
        assert rel(got, want) < tol(torch.float32), act  # IEEE fp32 dots, not tf32


@pytest.mark.parametrize("T", sizes(1, 300, interpreter_max=1))
def test_all_tokens_on_one_expert_and_block_configs(T):
    """Worst-case imbalance (every pair on the same experts) fits the worst-case buffers; every table entry, the
    small-batch pair path (at any T) and explicit configs give the same result."""
    from modelgen.runtime.layers.moe import kernels as gm

    E, k, H, I = 64, 2, 256, 128
    w13, w2 = experts(E, H, I, LOW, seed=5)
    hidden = torch.randn(T, H, device=DEV, dtype=LOW)
    w = torch.rand(T, k, device=DEV)
    ids = torch.tensor([[3, 40]], device=DEV, dtype=torch.int32).expand(T, k).contiguous()
    want = reference(hidden, w13, w2, w, ids)
    configs = [cfg for _, cfg in gm._TABLE] + [dict(BLOCK_M=32, up=(32, 64, 4, 2), down=(64, 32, 4, 2)),
                                               dict(pairs=True, up=(32, 64, 4, 2), down=(8, 512, 4, 1))]
    for cfg in configs + gm._PAIR_CANDIDATES:
        assert rel(gm.fused_moe(hidden, w13, w2, w, ids, config=cfg), want) < tol(LOW), cfg


@pytest.mark.parametrize("T", [1, 3])
@pytest.mark.parametrize("wdtype", [torch.float32, "low"])
def test_down_over_slots_matches_the_per_pair_down(T, wdtype):
    """The pair path's two down kernels (one program per pair + last-arrival combine, or one per token over its
    slots) round the same steps in the same order; only their fp32 dot products may associate differently (tile
    shapes), so they agree within a few 16-bit ulps, and both match the float64 reference -- also with expert
    parallelism and shared slots, whose slots the slot kernel must skip or weigh 1 exactly as the pair kernel."""
    from modelgen.runtime.layers.moe import kernels as gm

    wdtype = LOW if wdtype == "low" else wdtype
    E, k, H, I, S, L = 32, 4, 128, 96, 1, 16
    w13, w2 = experts(L + S, H, I, LOW, seed=21)
    hidden = torch.randn(T, H, device=DEV, dtype=LOW)
    w, ids = routing(T, E, k, seed=22, dtype=wdtype)
    slots = [c for c in gm._PAIR_CANDIDATES if c.get("down_slots")]
    assert slots
    local = ids.long() - L
    local = torch.where((local >= 0) & (local < L), local, torch.full_like(local, L + S))
    all_ids = torch.cat([local, torch.full((T, S), L, device=DEV)], dim=1)
    all_w = torch.cat([w.float(), torch.ones(T, S, device=DEV)], dim=1)
    cases = [(dict(num_local_experts=L), reference(hidden, w13[:L], w2[:L], w, ids, num_local_experts=L)),
             (dict(expert_offset=L, num_local_experts=L, num_shared=S),
              reference(hidden, w13, w2, all_w, all_ids, num_local_experts=L + S))]
    for kw, truth in cases:
        want = gm.fused_moe(hidden, w13, w2, w, ids, config=dict(gm._PAIRS), **kw)
        assert rel(want, truth) < tol(LOW)
        for cfg in slots:
            got = gm.fused_moe(hidden, w13, w2, w, ids, config=cfg, **kw)
            assert rel(got, want) < 2e-3 and rel(got, truth) < tol(LOW), (cfg, kw)


@pytest.mark.parametrize("T", sizes(1, 3, 7, 64, interpreter_max=7))  # 1 and 3: the small-batch pair path
def test_expert_parallel_ranges_sum_to_the_whole(T):
    """Two ranks holding experts [0, E/2) and [E/2, E) compute only their experts; their sum is the full result.
    A rank's pairs on the other rank's experts are dropped (never read back as garbage)."""
    from modelgen.runtime.layers.moe import kernels as gm

    E, k, H, I = 64, 8, 256, 128
    w13, w2 = experts(E, H, I, LOW, seed=11)
    hidden = torch.randn(T, H, device=DEV, dtype=LOW)
    w, ids = routing(T, E, k, seed=12)
    half = E // 2
    parts = [gm.fused_moe(hidden, w13[r * half:(r + 1) * half].contiguous(), w2[r * half:(r + 1) * half].contiguous(),
                          w, ids, expert_offset=r * half, num_local_experts=half) for r in range(2)]
    for r, part in enumerate(parts):
        want = reference(hidden, w13[r * half:(r + 1) * half], w2[r * half:(r + 1) * half], w, ids,
                         expert_offset=r * half, num_local_experts=half)
        assert rel(part, want) < tol(LOW)
    assert rel(parts[0].float() + parts[1].float(), reference(hidden, w13, w2, w, ids)) < tol(LOW)


@pytest.mark.parametrize("T", sizes(1, 4, 7, 300, interpreter_max=7))
@pytest.mark.parametrize("S", [1, 2])
def test_shared_expert_slots(T, S):
    """GLM4-MoE's fused shared experts: S extra slots after the L routed ones, visited by every token at weight 1;
    also with expert parallelism (this rank's routed range only)."""
    from modelgen.runtime.layers.moe import kernels as gm

    E, k, H, I = 16, 4, 128, 64
    L, off = 8, 8  # rank 1 of 2
    w13, w2 = experts(L + S, H, I, LOW, seed=S)
    hidden = torch.randn(T, H, device=DEV, dtype=LOW)
    w, ids = routing(T, E, k, seed=T + S)
    got = gm.fused_moe(hidden, w13, w2, w, ids, expert_offset=off, num_local_experts=L, num_shared=S)
    local = ids.long() - off
    local = torch.where((local >= 0) & (local < L), local, torch.full_like(local, L + S))
    all_ids = torch.cat([local, torch.arange(L, L + S, device=DEV).expand(T, S)], dim=1)
    all_w = torch.cat([w, torch.ones(T, S, device=DEV)], dim=1)
    want = reference(hidden, w13, w2, all_w, all_ids, num_local_experts=L + S)
    assert rel(got, want) < tol(LOW)
    # num_shared=0 (ranks other than 0): the shared slots contribute nothing
    got0 = gm.fused_moe(hidden, w13, w2, w, ids, expert_offset=off, num_local_experts=L, num_shared=0)
    assert rel(got0, reference(hidden, w13[:L], w2[:L], w, ids, expert_offset=off, num_local_experts=L)) < 1e-2


@cuda_only
@pytest.mark.parametrize("T", [1, 8, 64])
def test_router_and_experts_replay_from_a_cuda_graph(T, monkeypatch):
    """Captured once, replayed on new hidden states and router weights (so new routing): no shape or host value of
    the first routing is baked into the graph."""
    from modelgen.runtime.layers.moe import kernels as gm

    monkeypatch.setattr(gm, "FUSED_ROUTER_T", 2)

    E, k, H, I = 128, 8, 512, 256
    w13, w2 = experts(E, H, I, torch.bfloat16, seed=3)
    router = torch.randn(E, H, device="cuda", dtype=torch.bfloat16) * 0.05
    hidden = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)

    def step():  # T = 1: the one-launch router and the pair path; 8, 64: top-k kernel and the sorted path
        weights, ids = gm.router(hidden, router, k, scoring="softmax", renormalize=True)
        return gm.fused_moe(hidden, w13, w2, weights, ids), weights, ids

    step()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, w_out, ids_out = step()
    seen = set()
    for _ in range(3):
        hidden.copy_(torch.randn_like(hidden))
        router.copy_(torch.randn_like(router) * 0.05)
        out.fill_(float("nan"))  # poison: the replay must write every element
        graph.replay()
        torch.cuda.synchronize()
        w_eager, ids_eager = gm.router(hidden, router, k, scoring="softmax", renormalize=True)
        assert torch.equal(ids_out, ids_eager) and torch.equal(w_out, w_eager)  # the replay routed the new inputs
        seen.add(tuple(ids_out[0].tolist()))
        assert rel(out, reference(hidden, w13, w2, w_out, ids_out)) < tol(torch.bfloat16)
    assert len(seen) > 1  # the routing did change between replays


# --------------------------------------------------------------------------------------------------------- engine
PROMPT = [1, 17, 42, 99, 3, 150, 64, 8, 23, 77, 5, 130]


@cuda_only
@pytest.mark.parametrize("name", ["qwen3_moe_norm", "qwen3_moe_nonorm", "glm4_moe_qknorm", "mixtral"])
def test_engine_moe_runs_the_kernels_and_matches_transformers(tmp_path, monkeypatch, name):
    """fp32 prefill logits and 16 greedy tokens (graphed decode) equal transformers, with the Triton MoE (router
    and experts) demonstrably in both prefill and the captured decode graphs."""
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams
    from modelgen.runtime.layers.moe import kernels as gm
    from tests.moe_fixtures import make_moe
    from tests.test_parity_llama import PREFILL_ATOL, hf_greedy, hf_logits

    route_calls = count_calls(monkeypatch, gm, "route")
    moe_calls = count_calls(monkeypatch, gm, "fused_moe")
    hf = make_moe(tmp_path, name)
    llm = LLM(tmp_path, target="rocm", dtype="float32", device="cuda", max_model_len=128)
    assert llm.backend == "triton"
    assert (llm.score(PROMPT).float().cpu() - hf_logits(hf, PROMPT)).abs().max().item() < PREFILL_ATOL
    assert moe_calls["calls"] > 0 and route_calls["calls"] > 0
    assert llm.generate([PROMPT], SamplingParams(max_new_tokens=16, ignore_eos=True))[0] == hf_greedy(hf, PROMPT, 16)
    assert llm.runner.graphs.captures >= 1 and route_calls["captured"] + moe_calls["captured"] > 0


@cuda_only
def test_engine_qwen3_moe_bf16_and_batch_equals_singles(tmp_path):
    """bf16 Qwen3-MoE prefill logits stay within the bf16 three-way bound of transformers; in fp32 a batch of prompts
    decoded together (graphed, routing differs per row) gives each prompt's tokens decoded alone (fp32: the dense
    GEMMs' choice per batch size must not flip near-tied tokens)."""
    import copy

    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams
    from tests.moe_fixtures import make_moe
    from tests.test_parity_llama import THREE_WAY_FACTOR, hf_logits

    hf = make_moe(tmp_path, "qwen3_moe_norm")
    gold = hf_logits(hf, PROMPT)
    hf_bf16 = copy.deepcopy(hf).to("cuda", torch.bfloat16)
    with torch.no_grad():
        floor = (hf_bf16(torch.tensor([PROMPT], device="cuda")).logits[0].float().cpu() - gold).abs().max().item()
    bf16 = LLM(tmp_path, target="rocm", dtype="bfloat16", device="cuda", max_model_len=128)
    err = (bf16.score(PROMPT).float().cpu() - gold).abs().max().item()
    assert err <= THREE_WAY_FACTOR * floor + 1e-2, f"bf16 error {err:.4f} vs HF bf16 floor {floor:.4f}"
    prompts = [PROMPT, [1, 5, 9, 33], [1, 7, 7, 7, 7, 7, 12], [1, 99]]
    params = SamplingParams(max_new_tokens=10, ignore_eos=True)
    llm = LLM(tmp_path, target="rocm", dtype="float32", device="cuda", max_model_len=128, max_num_seqs=4)
    single = LLM(tmp_path, target="rocm", dtype="float32", device="cuda", max_model_len=128, max_num_seqs=1)
    assert llm.generate(prompts, params) == [single.generate([p], params)[0] for p in prompts]
