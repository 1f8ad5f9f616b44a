"""Graphed speculative steps (runtime/targets/rocm/cuda_graphs.py ``StepGraphs``, wired in
runtime/engine/speculative.py ``enable_graphs``), on the CPU: a fake "graph" records the captured callable and
replays it, so every replay reads only the bucket's static buffers (ids, positions, slots, contexts, block tables,
the draft's hidden-state input) exactly as a CUDA graph does -- what these tests check is the bookkeeping: the
layouts (MLA rows, GQA varlen), the padding of short steps and of missing sequences, the static hidden input, the
gather of real rows. The kernels inside the graphs on a GPU are tests/test_gpu_speculative.py's part.
"""
from __future__ import annotations

import warnings

import pytest
import torch

from modelgen.runtime.work import Work
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.engine.speculative import SpeculativeDecoder
from modelgen.runtime.targets.rocm.cuda_graphs import StepGraphs, multi_token_layout
from tests.parity_helpers import llm as make_llm
from tests.test_speculative import PROMPTS, _oracle, ckpts  # noqa: F401 (the checkpoints fixture)

pytestmark = pytest.mark.filterwarnings("ignore")


class FakeCapture:
    """``capture(fn) -> (outputs, replay)``: the replay re-runs the recorded callable into the same output tensor."""

    def __init__(self):
        self.captures = 0

    def __call__(self, fn):
        self.captures += 1
        out = fn()
        outs = out if isinstance(out, tuple) else (out,)  # a head=True graph: (hidden, argmax, fed ids)

        def replay():
            new = fn()
            for o, n in zip(outs, new if isinstance(new, tuple) else (new,)):
                o.copy_(n)
        return out, replay


def _engine(path, **kw):
    kw.setdefault("max_num_seqs", 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_llm(path, "rocm", **kw)


def _greedy(n):
    return SamplingParams(max_new_tokens=n, ignore_eos=True)


def _graphed(path, k, buckets=(1, 2, 4, 8), **kw):
    llm = _engine(path, speculative_tokens=k, **kw)
    fake = FakeCapture()
    llm.speculative.enable_graphs(list(buckets), capture=fake)
    return llm, fake


# --------------------------------------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("kind, verify, draft", [("deepseek", "rows", "rows"), ("glm4_moe_plain", "varlen", "varlen"),
                                                 ("qwen3_next", "varlen", "varlen")])
def test_layouts(ckpts, kind, verify, draft):
    """MLA -> decode rows, GQA -> fixed varlen, Gated DeltaNet (+ GQA) -> varlen with state slots; one token per
    sequence -> rows."""
    llm = _engine(ckpts(kind)[0], speculative_tokens=2)
    assert multi_token_layout(llm.model, 3) == verify
    assert multi_token_layout(llm.speculative.draft, 3) == draft
    assert multi_token_layout(llm.speculative.draft, 1) == "rows"


@pytest.mark.parametrize("kind, layouts", [("deepseek", ["rows"]), ("glm4_moe_plain", ["varlen", "rows"])])
def test_step_graph_equals_eager_step(ckpts, kind, layouts):
    """One verify-shaped step (sequences with 1..Q tokens, fewer sequences than the bucket) through a StepGraphs
    replay gives the eager runner's hidden states, and writes the cache only at the real tokens' slots. GQA also
    through the rows layout (valid on the torch path, which writes every key before attending)."""
    llm = _engine(ckpts(kind)[0], max_num_seqs=4)
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12], [1, 2, 3, 4, 5, 6, 7]]
    for seq, p in enumerate(prompts):
        llm.blocks.ensure(seq, len(p) + 4)
        llm.runner.step([Work(seq, p, 0)])
    work = [Work(0, [3, 4, 5, 6], 5), Work(1, [7], 3), Work(2, [9, 2], 7)]
    tables = [llm.blocks.tables[w.seq_id] for w in work]
    caches = [t for t in _cache_tensors(llm.model)]
    before = [t.clone() for t in caches]
    _, want = llm.runner.step(work, return_hidden=True)
    written = [(t - b).abs().amax() for t, b in zip(caches, before)]
    for layout in layouts:
        for t, b in zip(caches, before):
            t.copy_(b)
        fake = FakeCapture()
        graphs = StepGraphs(llm.model, llm.device, tokens_per_seq=4, layout=layout, max_num_seqs=4,
                            width=llm.blocks.blocks_needed(llm.max_model_len + 4), block_size=llm.blocks.block_size,
                            buckets=[4], capture=fake)
        got = graphs.run(work, tables)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        assert graphs.replays == 1 and fake.captures == 1
        # Only the real tokens' slots were written: restoring them gives back the old cache exactly.
        slots = [t[p // llm.blocks.block_size] * llm.blocks.block_size + p % llm.blocks.block_size
                 for w, t in zip(work, tables) for p in range(w.start_pos, w.start_pos + len(w.token_ids))]
        for t, b, w in zip(caches, before, written):
            assert w > 0
            flat_t, flat_b = _slots_view(t, llm.blocks.block_size), _slots_view(b, llm.blocks.block_size)
            keep = torch.ones(flat_t.shape[0], dtype=torch.bool)
            keep[slots] = False
            assert torch.equal(flat_t[keep], flat_b[keep])
        # A second step reuses the bucket (no new capture) and still matches.
        work2 = [Work(1, [4, 4, 4], 3)]
        _, want2 = llm.runner.step(work2, return_hidden=True)
        torch.testing.assert_close(graphs.run(work2, [llm.blocks.tables[1]]), want2, atol=1e-5, rtol=1e-5)
        assert graphs.captures == 1 and graphs.replays == 2


@pytest.mark.parametrize("kind", ["qwen3_next", "qwen3_5"])
def test_step_graph_gdn_states(ckpts, kind):
    """A Gated DeltaNet target's verify-shaped step through StepGraphs (varlen + state slots; each GDN layer runs its
    one-token op once per token slot) gives the eager runner's hidden states (chunked op: equal up to float32
    summation order) and leaves every state slot as the eager step does: real sequences advanced over their real
    tokens only (padding slots of a short window write nothing), a fresh sequence (position 0) read as zeros whatever
    its slot held, a sequence outside the step and the padding sequences' slots untouched."""
    llm = _engine(ckpts(kind)[0], max_num_seqs=8)
    pool = llm.state_pool
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12], [1, 2, 3, 4, 5, 6, 7], [8, 8, 8]]
    for seq, p in enumerate(prompts):
        llm.blocks.ensure(seq, len(p) + 4)
        pool.allocate(seq)
        llm.runner.step([Work(seq, p, 0)])
    llm.blocks.ensure(4, 4)
    pool.allocate(4)
    states = [t for pair in pool.tensors().values() for t in pair]
    for t in states:
        t[pool.slot(4)] = 3.0  # a fresh sequence's slot holds garbage: it must be read as zeros
    work = [Work(0, [3, 4, 5, 6], 5), Work(1, [7], 3), Work(4, [9, 2], 0), Work(2, [9, 2, 1], 7)]
    tables = [llm.blocks.tables[w.seq_id] for w in work]
    slots = [pool.slot(w.seq_id) for w in work]
    before = [t.clone() for t in states]
    _, want = llm.runner.step(work, return_hidden=True)
    after = [t.clone() for t in states]
    for t, b in zip(states, before):
        t.copy_(b)
    fake = FakeCapture()
    graphs = StepGraphs(llm.model, llm.device, tokens_per_seq=4, layout="varlen", max_num_seqs=8,
                        width=llm.blocks.blocks_needed(llm.max_model_len + 4), block_size=llm.blocks.block_size,
                        buckets=[8], capture=fake)
    assert graphs.with_state
    got = graphs.run(work, tables, state_slots=slots)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    untouched = pool.slot(3)
    for t, a, b in zip(states, after, before):
        torch.testing.assert_close(t, a, atol=1e-4, rtol=1e-4)
        assert torch.equal(t[untouched], b[untouched])
        assert not torch.equal(t[slots[0]], b[slots[0]])
    # The same step with the fresh sequence's window cut to one token: the slots it does not reach stay as they were.
    for t, b in zip(states, before):
        t.copy_(b)
    short = [Work(4, [9], 0)]
    graphs.run(short, [llm.blocks.tables[4]], state_slots=[pool.slot(4)])
    for t, b in zip(states, before):
        for s_ in (slots[0], slots[1], slots[3], untouched):
            assert torch.equal(t[s_], b[s_])
    assert graphs.captures == 1 and graphs.replays == 2
    with pytest.raises(ValueError, match="state slot"):
        graphs.run(work, tables)


def _cache_tensors(model):
    out = []
    for m in model.modules():
        for name in ("k_cache", "v_cache", "cache"):
            t = getattr(m, name, None)
            if isinstance(t, torch.Tensor):
                out.append(t)
    return out


def _slots_view(cache, block_size):
    """Cache rows by slot: MLA ``[blocks, bs, D]``; paged K/V ``[blocks, KVH, bs, D]``."""
    if cache.dim() == 3:
        return cache.reshape(-1, cache.shape[-1])
    return cache.transpose(1, 2).reshape(cache.shape[0] * block_size, -1)


def test_accepts():
    g = StepGraphs(torch.nn.Identity(), torch.device("cpu"), tokens_per_seq=3, layout="rows", max_num_seqs=4,
                   width=4, block_size=4, buckets=[2, 4], capture=FakeCapture())
    assert g.accepts([Work(0, [1, 2, 3], 0)] * 4)
    assert not g.accepts([Work(0, [1], 0)] * 5)  # beyond the largest bucket
    assert not g.accepts([Work(0, [1, 2, 3, 4], 0)])  # a longer run (a prompt chunk)
    assert not g.accepts([])
    with pytest.raises(ValueError, match="layout"):
        StepGraphs(torch.nn.Identity(), torch.device("cpu"), tokens_per_seq=3, layout="dense", max_num_seqs=4,
                   width=4, block_size=4)


# ------------------------------------------------------------------------------------------------- engine: greedy
@pytest.mark.parametrize("kind", ["deepseek", "glm4_moe_plain", "qwen3_next"])
@pytest.mark.parametrize("k", [1, 3])
def test_graphed_greedy_equals_plain(ckpts, monkeypatch, kind, k):
    """Speculation with graphed verify / draft steps equals plain greedy decoding, with random heads (rejections)
    and with oracle drafts corrupted mid-run (accepted runs, partial acceptances, requests ending inside a run, fewer
    drafts near max_new_tokens: padded slots); the graphs were replayed."""
    path, _ = ckpts(kind)
    ref = _engine(path).generate(PROMPTS, _greedy(12))
    eager = _engine(path, speculative_tokens=k)
    spec, fake = _graphed(path, k)
    drafts = {id(eager.speculative): [], id(spec.speculative): []}
    original = SpeculativeDecoder._draft

    def recording(self, batch, *args):
        original(self, batch, *args)
        drafts[id(self)].append(sorted((r.seq_id, tuple(d.tokens)) for r in batch
                                      for s_, d in self.drafted.items() if s_ == r.seq_id))

    monkeypatch.setattr(SpeculativeDecoder, "_draft", recording)
    assert eager.generate(PROMPTS, _greedy(12)) == ref
    assert spec.generate(PROMPTS, _greedy(12)) == ref
    # The graphed draft proposes what the eager one does (its hidden-state input and chained steps are right).
    assert drafts[id(spec.speculative)] == drafts[id(eager.speculative)] and any(drafts[id(spec.speculative)])
    monkeypatch.setattr(SpeculativeDecoder, "_draft", original)
    replays = spec.speculative.graph_replays()
    assert replays["draft"] > 0
    assert replays["verify"] > 0
    assert (replays["draft_chain"] is None) if k == 1 else replays["draft_chain"] > 0
    _oracle(monkeypatch, spec, {tuple(p): r for p, r in zip(PROMPTS, ref)}, lambda n, j: n % 3 == 1 and j == 0)
    for max_new in (12, 5):
        assert spec.generate(PROMPTS, _greedy(max_new)) == [r[:max_new] for r in ref]
    s = spec.stats.as_dict()["speculative"]
    assert 0 < s["accepted_tokens"] < s["proposed_tokens"]
    assert fake.captures == sum(len(g._buckets) for g in (spec.speculative.verify_graphs, spec.speculative.draft_graphs,
                                                          spec.speculative.chain_graphs) if g is not None)


@pytest.mark.parametrize("kind", ["deepseek", "qwen3_next"])
def test_warmup_captures_every_bucket(ckpts, kind):
    """``LLM.warmup`` captures every batch bucket of the verify, draft and chained-draft graphs up front, so a
    bucket first met mid-generation (a batch shrinking as requests finish, a chained step over fewer active
    sequences) costs no capture inside a timed step; output stays plain greedy."""
    path, _ = ckpts(kind)
    ref = _engine(path).generate(PROMPTS, _greedy(9))
    spec, fake = _graphed(path, 2, buckets=(1, 2, 4, 8))
    sets = [g for g in (spec.speculative.verify_graphs, spec.speculative.draft_graphs, spec.speculative.chain_graphs)
            if g is not None]
    assert len(sets) == 3 and fake.captures == 0
    spec.warmup()
    assert fake.captures == 3 * 4 and all(sorted(g._buckets) == [1, 2, 4, 8] for g in sets)
    assert spec.generate(PROMPTS, _greedy(9)) == ref
    assert fake.captures == 12 and spec.speculative.graph_replays()["verify"] > 0
    # launch.release_graphs (before a NCCL group goes) drops them; speculation then runs eagerly, still exact
    from modelgen.runtime.parallel.launch import release_graphs

    release_graphs(spec)
    assert spec.speculative.graph_replays() == {"verify": None, "draft": None, "draft_chain": None}
    assert spec.generate(PROMPTS, _greedy(9)) == ref


def test_graphed_small_buckets_and_chunked_prefill(ckpts):
    """More sequences than the largest bucket (eager fallback), prompt chunks (eager), small cache with preemption."""
    path, _ = ckpts("deepseek")
    prompts = PROMPTS + [[7] * 20, [3, 9] * 6]
    ref = _engine(path).generate(prompts, _greedy(10))
    spec, _ = _graphed(path, 2, buckets=(1, 2), max_num_batched_tokens=8, num_blocks=10, block_size=4, max_num_seqs=3)
    assert spec.generate(prompts, _greedy(10)) == ref
    assert spec.speculative.graph_replays()["verify"] > 0
    assert spec.blocks.num_free == spec.blocks.num_blocks


# ------------------------------------------------------------------------------- the Triton kernels inside the steps
@pytest.mark.gpu
@pytest.mark.skipif(not __import__("tests.gpu_helpers").gpu_helpers.INTERPRET,
                    reason="Triton's interpreter: TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1 (on a GPU: "
                           "tests/test_gpu_speculative.py)")
@pytest.mark.parametrize("kind", ["deepseek", "glm4_moe_plain", "qwen3_next"])
def test_graphed_layouts_through_triton_kernels(ckpts, monkeypatch, kind):
    """The recorded steps run the GPU path's kernels (Triton's interpreter on the CPU): MLA decode rows over the
    latents written first, GQA's fixed-shape varlen prefill with padded slots (Qwen3-Next: its draft, and its
    verify step with the GDN decode kernels once per token slot, with rollbacks). Greedy equals plain greedy (fp32)
    with oracle drafts that leave some slots padded (fewer drafts near the end) and reject mid-run."""
    path, _ = ckpts(kind)
    prompts = PROMPTS[:2]
    ref = _engine(path).generate(prompts, _greedy(7))
    spec, _ = _graphed(path, 2, buckets=(2,))
    _oracle(monkeypatch, spec, {tuple(p): r for p, r in zip(prompts, ref)}, lambda n, j: n % 3 == 1 and j == 1)
    assert spec.generate(prompts, _greedy(7)) == ref
    replays = spec.speculative.graph_replays()
    assert replays["draft"] > 0 and replays["draft_chain"] > 0
    assert replays["verify"] > 0
    s = spec.stats.as_dict()["speculative"]
    assert 0 < s["accepted_tokens"] < s["proposed_tokens"]
    assert s["rollbacks"] > 0 if kind == "qwen3_next" else s["rollbacks"] == 0


def test_graphed_dsa_and_glm5(tmp_path):
    """DeepSeek-V3.2 (DSA indexer: each decode row selects its top-k keys below its own context) and GLM-5 (shared
    DSA layers reading an earlier layer's index inputs off the step's metadata) through graphed MLA rows."""
    from tests.mtp_fixtures import make_deepseek_mtp

    for name in ("v32_sparse", "glm5_dense"):
        path = tmp_path / name
        make_deepseek_mtp(path, name)
        ref = _engine(path).generate(PROMPTS[:3], _greedy(8))
        spec, _ = _graphed(path, 3)
        assert spec.generate(PROMPTS[:3], _greedy(8)) == ref
        replays = spec.speculative.graph_replays()
        assert replays["verify"] > 0 and replays["draft"] > 0 and replays["draft_chain"] > 0


# -------------------------------------------------------------------------------------- drafts kept on the device
def _spy(monkeypatch):
    """Counts of what the device-resident path must (and must not) do: verify replays fed drafts by reference (ids
    ``-1 - r``), drafts read back to the host outside the verify step's one read. (The draft over a whole prompt runs
    eagerly, so the first verify step of a generate call feeds host tokens.)"""
    from modelgen.runtime.engine import speculative as sp

    seen = {"by_reference": 0, "verify_head": 0, "read_back": 0}
    run = StepGraphs.run

    def counting_run(self, work, tables, hidden=None, state_slots=None, head=False):
        if head and hidden is None:  # the target's verify step
            seen["verify_head"] += 1
            seen["by_reference"] += any(t < 0 for w in work for t in w.token_ids)
        return run(self, work, tables, hidden, state_slots, head)

    read = sp.SpeculativeDecoder._read_drafts

    def counting_read(self):
        seen["read_back"] += sum(e.resident for e in self.drafted.values())
        read(self)

    monkeypatch.setattr(StepGraphs, "run", counting_run)
    monkeypatch.setattr(sp.SpeculativeDecoder, "_read_drafts", counting_read)
    return seen


def _override(ref_by_prompt, corrupt):
    """``propose_override`` with the reference continuation; ``corrupt(n_out, j)``: draft j proposed when the
    request had n_out tokens is a wrong token instead."""
    def propose(requests, j):
        out = []
        for r in requests:
            n = len(r.output)
            t = ref_by_prompt[tuple(r.prompt)][n + j]
            out.append((t + 1) % 160 if corrupt(n, j) else t)
        return out
    return propose


@pytest.mark.parametrize("kind", ["deepseek", "glm4_moe_plain", "qwen3_next"])
@pytest.mark.parametrize("k", [1, 3])
def test_device_resident_greedy_equals_plain(ckpts, monkeypatch, kind, k):
    """Graphed greedy speculation with the drafts kept on the device (the default with graphs): every verify step
    feeds its drafts by reference to the draft buffer, no draft is read back on its own, and the output equals
    plain greedy decoding -- with the random head (rejections), and with device-side oracle drafts corrupted
    mid-run (accepted runs, partial acceptances, Gated DeltaNet rollbacks, requests ending inside a run)."""
    path, _ = ckpts(kind)
    ref = _engine(path).generate(PROMPTS, _greedy(16))
    spec, _ = _graphed(path, k)
    assert spec.speculative.resident
    seen = _spy(monkeypatch)
    assert spec.generate(PROMPTS, _greedy(16)) == ref
    assert seen["by_reference"] > 0 and seen["verify_head"] - seen["by_reference"] <= 1 and seen["read_back"] == 0
    spec.speculative.propose_override = _override({tuple(p): r for p, r in zip(PROMPTS, ref)},
                                                  lambda n, j: n % 3 == 1 and j == k - 1)
    for max_new in (16, 5):
        assert spec.generate(PROMPTS, _greedy(max_new)) == [r[:max_new] for r in ref]
        s = spec.stats.as_dict()["speculative"]
        if max_new == 16:
            assert 0 < s["accepted_tokens"] < s["proposed_tokens"]
            assert s["rollbacks"] > 0 if kind == "qwen3_next" else s["rollbacks"] == 0
    assert seen["read_back"] == 0 and seen["verify_head"] - seen["by_reference"] <= 3  # one per generate call
    # the same engine with the host path (drafts read after each draft step) gives the same tokens
    host, _ = _graphed(path, k)
    host.speculative.enable_graphs([1, 2, 4, 8], capture=FakeCapture(), resident=False)
    host.speculative.propose_override = spec.speculative.propose_override
    assert not host.speculative.resident and host.generate(PROMPTS, _greedy(16)) == ref


def test_gdn_rewind_after_the_draft_launch(ckpts, monkeypatch):
    """Qwen3-Next, K = 3, oracle drafts corrupted mid-run: a step's checkpoint rewind (StatePool.rewind) is issued
    after its draft graphs launched (the draft never reads the target's recurrent states), and the output still
    equals plain greedy decoding."""
    from modelgen.runtime.state_cache import StatePool

    path, _ = ckpts("qwen3_next")
    ref = _engine(path).generate(PROMPTS, _greedy(16))
    spec, _ = _graphed(path, 3)
    dec, events = spec.speculative, []
    for name, graphs in (("verify", dec.verify_graphs), ("draft", dec.draft_graphs)):
        run = graphs.run
        monkeypatch.setattr(graphs, "run", lambda *a, _run=run, _name=name, **kw: (events.append(_name),
                                                                                   _run(*a, **kw))[1])
    rewind = StatePool.rewind
    monkeypatch.setattr(StatePool, "rewind", lambda self, *a: (events.append("rewind"), rewind(self, *a))[1])
    dec.propose_override = _override({tuple(p): r for p, r in zip(PROMPTS, ref)}, lambda n, j: n % 3 == 1 and j == 1)
    assert spec.generate(PROMPTS, _greedy(16)) == ref
    steps = [x.split() for x in " ".join(events).split("verify") if "rewind" in x]  # verify ... next verify
    assert steps and all(x.index("rewind") > x.index("draft") for x in steps)
    assert spec.stats.as_dict()["speculative"]["rollbacks"] > 0


@pytest.mark.parametrize("checkpoints", [True, False])
def test_gdn_rollback_rewinds_to_checkpoints(ckpts, monkeypatch, checkpoints):
    """Qwen3-Next, K = 3, oracle drafts corrupted mid-run: with the verify graph's per-token state checkpoints (the
    default) a rejection rewinds the states (StatePool.rewind) -- no snapshot is taken, no re-advance runs -- and
    the output equals plain greedy decoding; without them, the snapshot / restore / re-advance path, same output."""
    from modelgen.runtime.state_cache import StatePool

    path, _ = ckpts("qwen3_next")
    ref = _engine(path).generate(PROMPTS, _greedy(16))
    spec, _ = _graphed(path, 3)
    spec.speculative.enable_graphs([1, 2, 4, 8], capture=FakeCapture(), checkpoints=checkpoints)
    calls = {"snapshot": 0, "rewind": 0}
    for name in calls:
        real = getattr(StatePool, name)

        def counted(self, *a, _real=real, _name=name, **kw):
            calls[_name] += 1
            return _real(self, *a, **kw)

        monkeypatch.setattr(StatePool, name, counted)
    graphs, readvance = spec.speculative.verify_graphs, []
    run = graphs.run
    monkeypatch.setattr(graphs, "run", lambda *a, **kw: (readvance.append(not kw.get("head")), run(*a, **kw))[1])
    spec.speculative.propose_override = _override({tuple(p): r for p, r in zip(PROMPTS, ref)},
                                                  lambda n, j: n % 3 == 1 and j == 1)
    assert spec.generate(PROMPTS, _greedy(16)) == ref
    s = spec.stats.as_dict()["speculative"]
    assert s["rollbacks"] > 0 and 0 < s["accepted_tokens"] < s["proposed_tokens"]
    assert readvance and not all(readvance)  # graphed resident verify steps ran (head=True)
    if checkpoints:
        assert calls["rewind"] > 0 and calls["snapshot"] == 0
        assert not any(readvance)  # no replay re-advanced a rolled-back state
    else:
        assert calls["rewind"] == 0 and calls["snapshot"] > 0 and any(readvance)


def test_device_resident_drafts_read_back_for_an_eager_step(ckpts, monkeypatch):
    """A step that cannot verify on the device (a prompt chunk joins, more sequences than the largest bucket)
    reads the waiting drafts in one transfer and runs the host path; output still plain greedy."""
    path, _ = ckpts("deepseek")
    prompts = PROMPTS + [[7] * 20, [3, 9] * 6]
    ref = _engine(path).generate(prompts, _greedy(12))
    lengths = [12, 3, 12, 5, 12, 12]  # two end early: the waiting prompts' chunks join requests with drafts
    spec, _ = _graphed(path, 2, buckets=(1, 2, 4), max_num_batched_tokens=16, max_num_seqs=4)
    seen = _spy(monkeypatch)
    assert spec.generate(prompts, [_greedy(n) for n in lengths]) == [r[:n] for r, n in zip(ref, lengths)]
    assert seen["by_reference"] > 0 and seen["read_back"] > 0
    assert spec.blocks.num_free == spec.blocks.num_blocks


def test_timeline_marks_each_resident_phase(ckpts, monkeypatch):
    """bench/spec_oracle.py --timeline: with speculative.TIMELINE set, each resident greedy step marks verify,
    the host read, the settle graph and each chained graph in order (K = 3: two chained steps), the output still
    equals plain greedy decoding; bench/spec_timeline.Timeline turns the marks into per-phase medians (fake CUDA
    events on the CPU: each event's time is its mark's index, so every interval is 1)."""
    from bench import spec_timeline
    from modelgen.runtime.engine import speculative

    path, _ = ckpts("deepseek")
    ref = _engine(path).generate(PROMPTS, _greedy(16))
    spec, _ = _graphed(path, 3)

    class Event:
        count = 0

        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            self.t, Event.count = Event.count, Event.count + 1

        def elapsed_time(self, other):
            return float(other.t - self.t)

    monkeypatch.setattr(spec_timeline.torch.cuda, "Event", Event)
    monkeypatch.setattr(spec_timeline.torch.cuda, "synchronize", lambda *a: None)
    tl = spec_timeline.Timeline()
    monkeypatch.setattr(speculative, "TIMELINE", tl)
    assert spec.generate(PROMPTS, _greedy(16)) == ref
    names = [[n for n, _, _ in marks] for marks in tl.steps]
    full = ["verify_start", "verify_end", "read_done", "settle_start", "settle_end",
            "chain1_start", "chain1_end", "chain2_start", "chain2_end"]
    # the last steps (requests near their end) draft less or not at all: a prefix of the full sequence
    assert len(names) > 3 and names.count(full) > len(names) // 2
    assert all(len(n) >= 3 and n == full[:len(n)] for n in names)
    rep = tl.report()
    assert rep["steps"] == len(names)
    assert {"verify", "settle", "chain1", "chain2", "verify_end->read_done", "read_done->settle_start",
            "chain2_end->next_verify_start"} <= set(rep["gpu_ms"])
    assert all(v == 1.0 for v in rep["gpu_ms"].values())
    assert rep["gpu_busy_ms"] == 4.0 and rep["gpu_gap_ms"] >= 4.0
