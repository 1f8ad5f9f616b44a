"""runtime/layers/moe/ops.py against transformers' MoE blocks, and runtime/loader/experts.py staging."""
from __future__ import annotations

import random
import threading
import time

import pytest
import torch
import torch.nn.functional as F

import modelgen.runtime.layers.moe.ops as moe_mod
from modelgen.runtime.loader.experts import NUM_THREADS_ENV, ExpertStager, ExpertStagingError
from modelgen.runtime.layers.moe.ops import fused_moe, fused_moe_static, route

transformers = pytest.importorskip("transformers")
from transformers import DeepseekV3Config, Glm4MoeConfig, MixtralConfig, Qwen3MoeConfig  # noqa: E402
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE  # noqa: E402
from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeMoE  # noqa: E402
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock  # noqa: E402
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock  # noqa: E402

H = 64
IMPLS = ("eager", "grouped_mm")  # HF experts implementations: eager loop (index_add_) and grouped_mm (sum over k)
ACCUMULATE = {"eager": "index_add", "grouped_mm": "sum"}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matrices: one intra-op thread is as fast and immune to oversubscription when other jobs share the CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _init(block: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        gate = getattr(block, "gate", None)
        if gate is not None and hasattr(gate, "e_score_correction_bias"):  # zero-initialised in HF
            gate.e_score_correction_bias.copy_(torch.randn(gate.e_score_correction_bias.shape, generator=g) * 0.1)
    return block.eval()


def _config(kind: str, impl: str = "eager", **overrides):
    if kind == "mixtral":
        cfg = MixtralConfig(hidden_size=H, intermediate_size=48, num_local_experts=8, num_experts_per_tok=2)
    elif kind == "qwen3":
        cfg = Qwen3MoeConfig(
            hidden_size=H, moe_intermediate_size=48, num_experts=16, num_experts_per_tok=4,
            norm_topk_prob=overrides.pop("norm_topk_prob", True),
        )
    elif kind in ("glm4", "deepseek_v3"):
        cls = Glm4MoeConfig if kind == "glm4" else DeepseekV3Config
        cfg = cls(
            hidden_size=H, intermediate_size=96, moe_intermediate_size=32, n_routed_experts=16, n_group=4,
            topk_group=2, num_experts_per_tok=4, n_shared_experts=1, routed_scaling_factor=2.5,
            norm_topk_prob=overrides.pop("norm_topk_prob", True),
        )
    else:
        raise AssertionError(kind)
    assert not overrides
    cfg._experts_implementation = impl
    return cfg


BLOCKS = {
    "mixtral": MixtralSparseMoeBlock, "qwen3": Qwen3MoeSparseMoeBlock, "glm4": Glm4MoeMoE,
    "deepseek_v3": DeepseekV3MoE,
}


def _block(kind: str, impl: str = "eager", seed: int = 0, **overrides):
    return _init(BLOCKS[kind](_config(kind, impl, **overrides)), seed)


def _route_like_hf(block, kind: str, h: torch.Tensor):
    """Our router fed the way the generated model feeds it (logits dtype as HF computes them)."""
    gate = block.gate
    if kind in ("mixtral", "qwen3"):
        logits = F.linear(h, gate.weight)
        renorm = True if kind == "mixtral" else gate.norm_topk_prob
        return route(logits, gate.top_k, scoring="softmax", renormalize=renorm)
    logits = F.linear(h.float(), block.gate.weight.float())  # GLM4 / DeepSeek-V3 route in float32
    return route(
        logits, gate.top_k, scoring="sigmoid", renormalize=gate.norm_topk_prob, n_group=gate.num_group,
        topk_group=gate.topk_group, e_score_correction_bias=gate.e_score_correction_bias,
        routed_scaling_factor=gate.routed_scaling_factor,
    )


def _ours(block, kind: str, x: torch.Tensor, accumulate: str = "index_add") -> torch.Tensor:
    h = x.reshape(-1, x.shape[-1])
    w, ids = _route_like_hf(block, kind, h)
    if kind == "qwen3":
        w = w.to(h.dtype)  # Qwen3MoeTopKRouter casts its weights to the logits (model) dtype
    out = fused_moe(h, block.experts.gate_up_proj, block.experts.down_proj, w, ids, accumulate=accumulate)
    if hasattr(block, "shared_experts"):
        out = out + block.shared_experts(h)
    return out.view_as(x)


def _x(dtype=torch.float32, tokens=24, seed=1):
    return torch.randn(2, tokens // 2, H, generator=torch.Generator().manual_seed(seed)).to(dtype)


# ----------------------------------------------------------------------------------------------------------- router
@pytest.mark.parametrize(
    "kind,overrides",
    [("mixtral", {}), ("qwen3", {"norm_topk_prob": True}), ("qwen3", {"norm_topk_prob": False}), ("glm4", {}),
     ("glm4", {"norm_topk_prob": False}), ("deepseek_v3", {})],
    ids=["mixtral", "qwen3-norm", "qwen3-nonorm", "glm4", "glm4-nonorm", "deepseek_v3"],
)
def test_router_matches_hf(kind, overrides):
    block = _block(kind, **overrides)
    h = _x().view(-1, H)
    with torch.no_grad():
        _, hf_w, hf_ids = block.gate(h)
        w, ids = _route_like_hf(block, kind, h)
    assert w.dtype == torch.float32 and ids.dtype == torch.int64
    assert torch.equal(ids, hf_ids)  # same ops in the same order: same ids, same (unsorted) order
    assert torch.equal(w, hf_w)
    if kind in ("glm4", "deepseek_v3"):  # the bias changed the selection somewhere (else the test proves little)
        unbiased = torch.topk(F.linear(h, block.gate.weight).sigmoid(), block.gate.top_k, dim=-1)[1]
        assert not torch.equal(ids.sort(-1)[0], unbiased.sort(-1)[0])


def test_router_qwen3_bf16_cast():
    block = _block("qwen3", norm_topk_prob=False).to(torch.bfloat16)
    h = _x(torch.bfloat16).view(-1, H)
    with torch.no_grad():
        _, hf_w, hf_ids = block.gate(h)
        w, ids = route(F.linear(h, block.gate.weight), 4, renormalize=False)
    assert hf_w.dtype == torch.bfloat16 and w.dtype == torch.float32
    assert torch.equal(ids, hf_ids) and torch.equal(w.to(torch.bfloat16), hf_w)


def test_router_traces_fullgraph():
    block = _block("glm4")
    logits = F.linear(_x().view(-1, H), block.gate.weight).detach()
    kw = dict(scoring="sigmoid", renormalize=True, n_group=4, topk_group=2,
              e_score_correction_bias=block.gate.e_score_correction_bias, routed_scaling_factor=2.5)
    compiled = torch.compile(lambda l: route(l, 4, **kw), fullgraph=True, backend="aot_eager")
    w, ids = compiled(logits)
    w_ref, ids_ref = route(logits, 4, **kw)
    assert torch.equal(ids, ids_ref) and torch.allclose(w, w_ref)


# ------------------------------------------------------------------------------------------------------- block output
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", ["mixtral", "qwen3", "glm4", "deepseek_v3"])
def test_block_fp32_matches_hf(kind, impl):
    block = _block(kind, impl)
    x = _x()
    with torch.no_grad():
        ref = block(x)
        for acc in ("index_add", "sum"):
            torch.testing.assert_close(_ours(block, kind, x, acc), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", ["mixtral", "qwen3", "glm4"])
def test_block_bf16_matches_hf(kind, impl):
    block = _block(kind, impl).to(torch.bfloat16)
    x = _x(torch.bfloat16, tokens=64)
    with torch.no_grad():
        ref = block(x).float()
        same = _ours(block, kind, x, ACCUMULATE[impl]).float()  # the accumulation order HF's impl uses
        other = _ours(block, kind, x, ACCUMULATE[IMPLS[1 - IMPLS.index(impl)]]).float()
    scale = ref.abs().max().item()
    # Matching accumulation reproduces HF (bit-exact on the CPUs we tried); the other order stays within bf16 rounding.
    assert (same - ref).abs().max().item() <= 2 ** -7 * scale
    assert (other - ref).abs().max().item() <= 2 ** -5 * scale


def test_hf_fused_attribute_layout():
    """transformers 5.x keeps experts fused: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I]."""
    block = _block("qwen3")
    E, I = 16, 48
    assert block.experts.gate_up_proj.shape == (E, 2 * I, H)
    assert block.experts.down_proj.shape == (E, H, I)
    h = _x().view(-1, H)[:3]
    e = 5
    gate, up = block.experts.gate_up_proj[e, :I], block.experts.gate_up_proj[e, I:]
    expected = F.linear(F.silu(F.linear(h, gate)) * F.linear(h, up), block.experts.down_proj[e])
    ids = torch.full((3, 1), e)
    got = fused_moe(h, block.experts.gate_up_proj, block.experts.down_proj, torch.ones(3, 1), ids)
    torch.testing.assert_close(got, expected.detach(), atol=1e-6, rtol=1e-6)


# ------------------------------------------------------------------------------------------ static / EP / looping
def _random_problem(T=16, E=8, I=24, k=2, seed=3, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(T, H, generator=g).to(dtype)
    w13 = (torch.randn(E, 2 * I, H, generator=g) * 0.2).to(dtype)
    w2 = (torch.randn(E, H, I, generator=g) * 0.2).to(dtype)
    w, ids = route(torch.randn(T, E, generator=g), k, renormalize=True)
    return hidden, w13, w2, w, ids


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_static_equals_dynamic(activation):
    hidden, w13, w2, w, ids = _random_problem()
    ref = fused_moe(hidden, w13, w2, w, ids, activation)
    torch.testing.assert_close(fused_moe_static(hidden, w13, w2, w, ids, activation), ref, atol=1e-5, rtol=1e-5)


def test_static_traces_fullgraph():
    hidden, w13, w2, w, ids = _random_problem()
    compiled = torch.compile(fused_moe_static, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(hidden, w13, w2, w, ids), fused_moe(hidden, w13, w2, w, ids),
                               atol=1e-5, rtol=1e-5)
    # expert-parallel arguments are static too
    compiled_ep = torch.compile(fused_moe_static, fullgraph=True, backend="aot_eager")
    got = compiled_ep(hidden, w13[2:6], w2[2:6], w, ids, expert_offset=2, num_local_experts=4)
    torch.testing.assert_close(got, fused_moe(hidden, w13[2:6], w2[2:6], w, ids, expert_offset=2,
                                              num_local_experts=4), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fn", [fused_moe, fused_moe_static], ids=["dynamic", "static"])
@pytest.mark.parametrize("split", [4, 3])
def test_expert_parallel_ranges_sum_to_full(fn, split):
    hidden, w13, w2, w, ids = _random_problem(E=8, k=3)
    full = fused_moe(hidden, w13, w2, w, ids)
    rank0 = fn(hidden, w13[:split], w2[:split], w, ids, expert_offset=0, num_local_experts=split)
    rank1 = fn(hidden, w13[split:], w2[split:], w, ids, expert_offset=split, num_local_experts=8 - split)
    assert rank0.abs().sum() > 0 and rank1.abs().sum() > 0
    torch.testing.assert_close(rank0 + rank1, full, atol=1e-5, rtol=1e-5)


def test_torch_path_visits_only_active_experts(monkeypatch):
    E, k = 64, 2
    hidden, w13, w2, _, _ = _random_problem(T=1, E=E, k=k)
    ids = torch.tensor([[41, 7]])
    w = torch.tensor([[0.75, 0.25]])
    weights_used: list[int] = []
    real_linear = F.linear
    ptr_to_expert = {w13[e].data_ptr(): e for e in range(E)} | {w2[e].data_ptr(): 100 + e for e in range(E)}

    def counting_linear(x, weight, bias=None):
        weights_used.append(ptr_to_expert.get(weight.data_ptr(), -1))
        return real_linear(x, weight, bias)

    monkeypatch.setattr(moe_mod.F, "linear", counting_linear)
    out = fused_moe(hidden, w13, w2, w, ids)
    monkeypatch.undo()
    assert sorted(weights_used) == [7, 41, 107, 141]  # two experts, gate/up + down each; nothing else touched
    expected = sum(
        wt * real_linear(F.silu(real_linear(hidden, w13[e, :24])) * real_linear(hidden, w13[e, 24:]), w2[e])
        for wt, e in ((0.75, 41), (0.25, 7))
    )
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_input_validation():
    hidden, w13, w2, w, ids = _random_problem()
    with pytest.raises(ValueError, match="activation"):
        fused_moe(hidden, w13, w2, w, ids, "relu")
    with pytest.raises(ValueError, match="shape mismatch"):
        fused_moe(hidden, w13, w2[:, :, :-1], w, ids)
    with pytest.raises(NotImplementedError, match="topk_softmax"):  # groups of raw logits: no model defines them
        route(torch.randn(4, 8), 2, scoring="topk_softmax", renormalize=True, n_group=2, topk_group=1)
    with pytest.raises(ValueError, match="group_score"):
        route(torch.randn(4, 8), 2, renormalize=True, n_group=2, topk_group=1, group_score="mean")


# ------------------------------------------------------------------------------------------------------------ stager
def _expert_tensors(E=6, shards=("w1", "w3"), shape=(4, 5)):
    g = torch.Generator().manual_seed(7)
    return {(e, s): torch.randn(shape, generator=g) for e in range(E) for s in shards}


def test_stager_threaded_stacks_once():
    tensors = _expert_tensors()
    calls = []
    threads_seen = set()

    def lazy(key):
        def read():
            time.sleep(random.random() * 0.01)
            threads_seen.add(threading.current_thread().name)
            return tensors[key]
        return read

    stager = ExpertStager(6, ("w1", "w3"), calls.append, num_threads=4, name="mlp.experts.w13_weight")
    keys = list(tensors)
    random.Random(0).shuffle(keys)
    for i, (e, s) in enumerate(keys):
        stager.add(e, s, lazy((e, s)) if i % 3 else tensors[(e, s)])  # mix lazy callables and ready tensors
    stager.finish()
    assert len(calls) == 1 and stager.completed
    stacked = calls[0]
    assert list(stacked) == ["w1", "w3"]
    for s in ("w1", "w3"):
        assert stacked[s].shape == (6, 4, 5)
        for e in range(6):
            assert torch.equal(stacked[s][e], tensors[(e, s)])
    assert all(name.startswith("modelgen-experts") for name in threads_seen)


def test_stager_fills_fused_param_for_fused_moe():
    """Per-expert gate/up/down matrices -> w13 (cat gate, up) and w2 through the stager -> same MoE output."""
    hidden, w13_ref, w2_ref, w, ids = _random_problem(E=8)
    I = w2_ref.shape[2]
    w13 = torch.empty_like(w13_ref)
    w2 = torch.empty_like(w2_ref)
    s13 = ExpertStager(8, ("w1", "w3"), lambda st: w13.copy_(torch.cat([st["w1"], st["w3"]], dim=1)), num_threads=3)
    s2 = ExpertStager(8, ("w2",), lambda st: w2.copy_(st["w2"]), num_threads=3)
    for e in reversed(range(8)):
        s13.add(e, "w3", lambda e=e: w13_ref[e, I:].clone())
        s2.add(e, "w2", lambda e=e: w2_ref[e].clone())
        s13.add(e, "w1", w13_ref[e, :I].clone())
    s13.finish()
    s2.finish()
    assert torch.equal(w13, w13_ref) and torch.equal(w2, w2_ref)
    assert torch.equal(fused_moe(hidden, w13, w2, w, ids), fused_moe(hidden, w13_ref, w2_ref, w, ids))


def test_stager_incomplete_names_missing():
    tensors = _expert_tensors()
    calls = []
    stager = ExpertStager(6, ("w1", "w3"), calls.append, num_threads=4, name="mlp.experts.w13_weight")
    for (e, s), t in tensors.items():
        if not (s == "w3" and e in (3, 5)):
            stager.add(e, s, lambda t=t: t)
    with pytest.raises(ExpertStagingError, match=r"mlp\.experts\.w13_weight: experts \[3, 5\] missing shard 'w3'"):
        stager.finish()
    assert calls == []


def test_stager_missing_runs_and_read_errors():
    stager = ExpertStager(6, ("w1", "w3"), lambda st: None, num_threads=2, name="p")
    for e in range(6):
        stager.add(e, "w1", torch.zeros(2))
    stager.add(5, "w3", torch.zeros(2))
    with pytest.raises(ExpertStagingError, match=r"p: experts \[0-4\] missing shard 'w3'"):
        stager.finish()

    def broken():
        raise OSError("disk gone")

    stager = ExpertStager(2, ("w2",), lambda st: None, num_threads=2, name="q")
    stager.add(0, "w2", torch.zeros(2))
    stager.add(1, "w2", broken)
    with pytest.raises(ExpertStagingError, match=r"q: expert 1 shard 'w2': OSError: disk gone"):
        stager.finish()

    stager = ExpertStager(2, ("w2",), lambda st: None, num_threads=2, name="r")
    stager.add(0, "w2", torch.zeros(2))
    with pytest.raises(ExpertStagingError, match="added twice"):
        stager.add(0, "w2", torch.zeros(2))
    with pytest.raises(ExpertStagingError, match="out of range"):
        stager.add(2, "w2", torch.zeros(2))
    with pytest.raises(ExpertStagingError, match="unknown shard"):
        stager.add(1, "w9", torch.zeros(2))


def test_stager_single_thread_is_per_expert():
    tensors = _expert_tensors(E=3)
    loaded = []
    completed = []
    main = threading.current_thread()

    def per_expert(e, s, t):
        assert threading.current_thread() is main
        loaded.append((e, s, t))

    stager = ExpertStager(3, ("w1", "w3"), completed.append, num_threads=1, per_expert_loader=per_expert)
    for i, ((e, s), t) in enumerate(tensors.items()):
        stager.add(e, s, (lambda t=t: t) if i % 2 else t)
        assert len(loaded) == i + 1 and loaded[-1][:2] == (e, s) and loaded[-1][2] is t  # immediately, in order
    stager.finish()
    assert completed == [] and not stager.completed

    stager = ExpertStager(3, ("w1",), completed.append, num_threads=1, per_expert_loader=per_expert, name="s")
    stager.add(0, "w1", torch.zeros(1))
    with pytest.raises(ExpertStagingError, match=r"s: experts \[1, 2\] missing shard 'w1'"):
        stager.finish()
    with pytest.raises(ValueError, match="per_expert_loader"):
        ExpertStager(3, ("w1",), completed.append, num_threads=1)


def test_stager_num_threads_from_env(monkeypatch):
    monkeypatch.delenv(NUM_THREADS_ENV, raising=False)
    assert ExpertStager(2, ("w1",), print).num_threads == 16
    monkeypatch.setenv(NUM_THREADS_ENV, "1")
    stager = ExpertStager(2, ("w1",), print, per_expert_loader=lambda *a: None)
    assert stager.num_threads == 1 and not stager.staged
    monkeypatch.setenv(NUM_THREADS_ENV, "zero")
    with pytest.raises(ValueError, match=NUM_THREADS_ENV):
        ExpertStager(2, ("w1",), print)


# ---------------------------------------------------------------- issue 26: Llama 4's input-side weight, DBRX's p-norm
def _per_token_experts(hidden, w13, w2, w, ids, on_input: bool):
    """``sum_j expert_{ids[t, j]}(w[t, j] * x_t)`` (or ``w[t, j] * expert(x_t)``), token by token: the definition."""
    out = torch.zeros_like(hidden)
    for t in range(hidden.shape[0]):
        for j in range(ids.shape[1]):
            e, x = int(ids[t, j]), hidden[t]
            y = F.linear(F.silu(F.linear(x * w[t, j] if on_input else x, w13[e, : w13.shape[1] // 2]))
                         * F.linear(x * w[t, j] if on_input else x, w13[e, w13.shape[1] // 2:]), w2[e])
            out[t] += y if on_input else y * w[t, j]
    return out


@pytest.mark.parametrize("fn", [fused_moe, fused_moe_static], ids=["dynamic", "static"])
def test_weight_on_input_is_the_definition_and_another_model(fn):
    """weight_on_input: each selected expert sees its weight times the token, outputs summed unweighted; the static
    path (every expert on every token, routed mask) and an expert-parallel split give the same; weighting the output
    instead is another result."""
    hidden, w13, w2, w, ids = _random_problem(k=2)
    want = _per_token_experts(hidden, w13, w2, w, ids, on_input=True)
    torch.testing.assert_close(fn(hidden, w13, w2, w, ids, weight_on_input=True), want, atol=1e-5, rtol=1e-5)
    halves = [fn(hidden, w13[a:b], w2[a:b], w, ids, expert_offset=a, num_local_experts=b - a, weight_on_input=True)
              for a, b in ((0, 3), (3, 8))]
    torch.testing.assert_close(halves[0] + halves[1], want, atol=1e-5, rtol=1e-5)
    assert (fn(hidden, w13, w2, w, ids) - want).abs().max() > 1e-2


def test_weight_on_input_static_traces_fullgraph():
    hidden, w13, w2, w, ids = _random_problem()
    compiled = torch.compile(fused_moe_static, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(hidden, w13, w2, w, ids, weight_on_input=True),
                               fused_moe(hidden, w13, w2, w, ids, weight_on_input=True), atol=1e-5, rtol=1e-5)


def test_topk_sigmoid_route_is_llama4s_router():
    """Llama4Router: top-k of the logits, each weight the sigmoid of its own logit, never renormalised."""
    from transformers import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4Router

    cfg = Llama4TextConfig(hidden_size=H, num_local_experts=6, num_experts_per_tok=2)
    router = Llama4Router(cfg)
    x = torch.randn(9, H)
    scores, logits = router(x)
    w, ids = route(logits, 2, scoring="topk_sigmoid", renormalize=True)
    dense = torch.zeros_like(scores).scatter(1, ids, w)
    torch.testing.assert_close(dense, scores, atol=1e-6, rtol=1e-6)
    assert (w.sum(dim=-1) - 1).abs().max() > 1e-3  # not renormalised


@pytest.mark.parametrize("p", [2.0, 1.5, 1.0])
def test_p_norm_renormalisation_is_dbrxs(p):
    """DbrxFFN.route_tokens_to_experts: softmax, top-k, divided by the p-norm of the k weights."""
    logits = torch.randn(11, 4)
    probs = torch.softmax(logits, dim=-1)
    top, top_ids = torch.topk(probs, 3, dim=-1)
    w, ids = route(logits, 3, scoring="softmax", renormalize=True, renormalize_p=p)
    assert torch.equal(ids, top_ids)
    torch.testing.assert_close(w, top / torch.norm(top, p=p, dim=-1, keepdim=True), atol=1e-6, rtol=1e-6)
    if p != 1.0:
        assert (w.sum(dim=-1) - 1).abs().max() > 1e-3  # the p-norm is not the sum
    with pytest.raises(ValueError, match="renormalize_p"):
        route(logits, 2, scoring="sigmoid", renormalize=True, renormalize_p=p + 1)


def test_modes_the_kernels_lack_take_the_torch_path_on_the_gpu(monkeypatch):
    """On a (pretended) Triton GPU, the router's topk_sigmoid scoring and a p-norm other than 1, the experts' weight
    on the input and non-gated experts never reach the Triton kernels (which implement none of them): the torch path
    runs."""
    import sys
    import types

    import modelgen.runtime.layers.moe as moe_pkg
    from modelgen.runtime.layers.moe.layer import FusedMoE, TopKRouter
    from modelgen.runtime.ops import gpu

    def no_kernel(*a, **kw):
        raise AssertionError("a Triton MoE kernel was called for a mode it does not implement")

    # kernels.py needs Triton: a stand-in whose every entry point fails takes its place
    fake = types.SimpleNamespace(fused_moe=no_kernel, router=no_kernel, supported=lambda *a: True)
    monkeypatch.setitem(sys.modules, "modelgen.runtime.layers.moe.kernels", fake)
    monkeypatch.setattr(moe_pkg, "kernels", fake, raising=False)
    monkeypatch.setattr(gpu, "enabled", lambda x: True)
    x = torch.randn(5, H)
    assert TopKRouter(H, 4, top_k=2, scoring="softmax", renormalize=True)._gpu(x)  # the pretence holds
    for router in (TopKRouter(H, 4, top_k=2, scoring="topk_sigmoid", renormalize=False),
                   TopKRouter(H, 4, top_k=2, scoring="softmax", renormalize=True, renormalize_p=2.0)):
        router.weight.data.normal_()
        assert not router._gpu(x)
        router(x)
    moe = FusedMoE(4, H, 24, weight_on_input=True)
    moe.w13_weight.data.normal_(std=0.2)
    moe.w2_weight.data.normal_(std=0.2)
    w, ids = route(torch.randn(5, 4), 2, scoring="topk_sigmoid", renormalize=False)
    torch.testing.assert_close(moe(x, w, ids), fused_moe(x, moe.w13_weight, moe.w2_weight, w, ids,
                                                         weight_on_input=True), atol=1e-5, rtol=1e-5)
    ungated = FusedMoE(4, H, 24, activation="relu2", gated=False)  # Nemotron-H's non-gated experts
    assert tuple(ungated.w13_weight.shape) == (4, 24, H)
    ungated.w13_weight.data.normal_(std=0.2)
    ungated.w2_weight.data.normal_(std=0.2)
    torch.testing.assert_close(ungated(x, w, ids), fused_moe(x, ungated.w13_weight, ungated.w2_weight, w, ids,
                                                             "relu2", gated=False), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fn", [fused_moe, fused_moe_static], ids=["dynamic", "static"])
def test_non_gated_experts_are_nemotron_hs(fn):
    """gated=False: w13 is the up projection alone ([E, I, H]); each expert is down(relu(up x)^2), as
    NemotronHExperts computes it; expert-parallel halves sum to the whole; the static path traces fullgraph."""
    from transformers import NemotronHConfig
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHExperts

    cfg = NemotronHConfig(hidden_size=H, n_routed_experts=6, moe_intermediate_size=24, mlp_hidden_act="relu2")
    hf = NemotronHExperts(cfg)
    torch.nn.init.normal_(hf.up_proj, std=0.2)
    torch.nn.init.normal_(hf.down_proj, std=0.2)
    hidden = torch.randn(10, H)
    w, ids = route(torch.randn(10, 6), 2, scoring="sigmoid", renormalize=True)
    with torch.no_grad():
        want = hf(hidden, ids, w)
    got = fn(hidden, hf.up_proj.data, hf.down_proj.data, w, ids, "relu2", gated=False)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    halves = [fn(hidden, hf.up_proj.data[a:b], hf.down_proj.data[a:b], w, ids, "relu2", expert_offset=a,
                 num_local_experts=b - a, gated=False) for a, b in ((0, 2), (2, 6))]
    torch.testing.assert_close(halves[0] + halves[1], want, atol=1e-5, rtol=1e-5)
    if fn is fused_moe_static:
        compiled = torch.compile(fused_moe_static, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(hidden, hf.up_proj.data, hf.down_proj.data, w, ids, "relu2",
                                            gated=False), want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="non-gated expert activation"):
        fn(hidden, hf.up_proj.data, hf.down_proj.data, w, ids, "swish", gated=False)
