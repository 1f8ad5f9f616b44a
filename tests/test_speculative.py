"""Speculative decoding with the checkpoint's MTP head (runtime/engine/speculative.py, generated mtp.py).

Random MTP weights accept almost nothing, which still must leave greedy output unchanged; the accept paths (runs of
accepted drafts, a request ending inside one, a stop token inside a draft, recurrent-state rollback after a partial
acceptance) are driven by an *oracle* draft that proposes the true greedy continuation, corrupted at chosen places.
"""
from __future__ import annotations

import json
import warnings

import pytest
import torch

from modelgen.runtime.work import Work
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.engine.speculative import SpeculativeDecoder, verify
from modelgen.runtime.layers.mtp import MissingDraftWeights
from tests.mtp_fixtures import make_deepseek_mtp, make_qwen3_next_mtp
from tests.parity_helpers import llm as make_llm

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [40]]


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # config keys the tiny HF configs carry but the specs do not read
        yield


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    cache = {}

    def get(kind: str):
        if kind not in cache:
            d = tmp_path_factory.mktemp(kind)
            if kind == "deepseek":
                model = make_deepseek_mtp(d)
            elif kind == "glm4_moe_plain":  # a GQA (+ MoE) target, for the graphed verify's varlen layout
                from tests.moe_fixtures import make_moe

                model = make_deepseek_mtp(d, kind, make=make_moe)
            else:
                model = make_qwen3_next_mtp(d, kind)
            cache[kind] = (d, model)
        return cache[kind]

    return get


def _engine(path, target="rocm", **kw):
    kw.setdefault("max_num_seqs", 8)
    return make_llm(path, target, **kw)


def _greedy(max_new=10, **kw):
    return SamplingParams(max_new_tokens=max_new, ignore_eos=True, **kw)


# ------------------------------------------------------------------------------------------- random heads: equality
@pytest.mark.parametrize("kind", ["deepseek", "qwen3_next"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_greedy_equal_random_head(ckpts, kind, k):
    path, _ = ckpts(kind)
    ref = _engine(path).generate(PROMPTS, _greedy())
    spec = _engine(path, speculative_tokens=k)
    assert spec.generate(PROMPTS, _greedy()) == ref
    stats = spec.stats.as_dict()
    assert stats["speculative"]["proposed_tokens"] > 0 and 0 <= stats["acceptance_rate"] <= 1


@pytest.mark.parametrize("kind", ["deepseek", "qwen3_next", "qwen3_5"])
def test_greedy_equal_neuron(ckpts, kind):
    path, _ = ckpts(kind)
    ref = _engine(path, "neuron").generate(PROMPTS, _greedy())
    assert _engine(path, "neuron", speculative_tokens=2).generate(PROMPTS, _greedy()) == ref


def test_greedy_equal_qwen3_5(ckpts):
    path, _ = ckpts("qwen3_5")
    ref = _engine(path).generate(PROMPTS[:2], _greedy(8))
    assert _engine(path, speculative_tokens=2).generate(PROMPTS[:2], _greedy(8)) == ref


@pytest.mark.parametrize("name", ["v32_sparse", "glm5_dense", "glm4_moe_plain", "qwen3_5_moe"])
def test_greedy_equal_other_mtp_specs(tmp_path, name):
    """The specs that inherit or declare an mtp: section: DeepSeek-V3.2 (DSA indexer in the MTP layer), GLM-5,
    GLM-4.5 (GQA MoE), Qwen3.5-MoE; the draft loads strictly and the output is plain greedy's."""
    if name == "qwen3_5_moe":
        make_qwen3_next_mtp(tmp_path, name)
    else:
        from tests.moe_fixtures import make_moe

        make_deepseek_mtp(tmp_path, name, **({"make": make_moe} if name.startswith("glm4") else {}))
    ref = _engine(tmp_path).generate(PROMPTS[:3], _greedy(8))
    spec = _engine(tmp_path, speculative_tokens=3)
    assert spec.generate(PROMPTS[:3], _greedy(8)) == ref
    assert spec.stats.as_dict()["speculative"]["proposed_tokens"] > 0


def test_fp8_checkpoint_with_mtp(tmp_path):
    """DeepSeek-V3's release is FP8 block-scaled, its MTP layer too: the draft reads through the dequantizing view."""
    from safetensors.torch import load_file, save_file

    from modelgen.runtime.layers.fp8 import quantize_block_fp8

    make_deepseek_mtp(tmp_path)
    index_path = tmp_path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    for shard in ("model.safetensors", "mtp.safetensors"):
        out = {}
        for name, t in load_file(tmp_path / shard).items():
            if name.endswith(("proj.weight", "proj_with_mqa.weight")) and t.dim() == 2:
                out[name], out[name + "_scale_inv"] = quantize_block_fp8(t, (32, 32))
                index["weight_map"][name + "_scale_inv"] = shard
            else:
                out[name] = t
        save_file(out, tmp_path / shard, metadata={"format": "pt"})
    index_path.write_text(json.dumps(index))
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                  "weight_block_size": [32, 32]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert any(k.startswith("model.layers.3.") and k.endswith("_scale_inv") for k in index["weight_map"])
    ref = _engine(tmp_path).generate(PROMPTS, _greedy(8))
    assert _engine(tmp_path, speculative_tokens=2).generate(PROMPTS, _greedy(8)) == ref


@pytest.mark.parametrize("kind", ["deepseek", "qwen3_next"])
def test_chunked_prefill_and_small_cache(ckpts, kind):
    """Prompt chunks (MTP fed chunk by chunk), preemption under a small cache, more requests than max_num_seqs."""
    path, _ = ckpts(kind)
    prompts = PROMPTS + [[7] * 20, [3, 9] * 6]
    ref = _engine(path).generate(prompts, _greedy(12))
    spec = _engine(path, speculative_tokens=3, max_num_batched_tokens=8, num_blocks=8, block_size=4, max_num_seqs=3)
    assert spec.generate(prompts, _greedy(12)) == ref
    assert spec.blocks.num_free == spec.blocks.num_blocks and not spec.speculative.drafted


def test_greedy_and_sampled_requests_share_a_batch(ckpts):
    """Greedy requests batched with sampled ones (rejection rule, GDN rollbacks) still equal plain greedy, and a
    seeded sampled request is reproducible."""
    path, _ = ckpts("qwen3_next")
    greedy = _greedy(12)
    sampled = [SamplingParams(max_new_tokens=12, temperature=0.9, top_p=0.9, seed=s, ignore_eos=True) for s in (1, 2)]
    ref = _engine(path).generate(PROMPTS[:2], greedy)
    spec = _engine(path, speculative_tokens=2)
    params = [greedy, sampled[0], greedy, sampled[1]]
    prompts = [PROMPTS[0], PROMPTS[2], PROMPTS[1], PROMPTS[3]]
    out = spec.generate(prompts, params)
    assert [out[0], out[2]] == ref
    assert spec.generate(prompts, params)[1::2] == out[1::2]
    assert all(len(o) == 12 for o in out)


# ----------------------------------------------------------------------------------------- oracle drafts: accept paths
def _oracle(monkeypatch, spec, refs: dict[tuple[int, ...], list[int]], corrupt):
    """After each draft pass, replace a request's drafts by the reference continuation; ``corrupt(n_out, j)`` says
    whether draft j (proposed when the request had n_out tokens) is replaced by a wrong token."""
    original = SpeculativeDecoder._draft
    by_seq = {}

    def drafted(self, batch, *args):
        original(self, batch, *args)
        for r in batch:
            if r.seq_id not in self.drafted:
                continue
            ref = by_seq.setdefault(r.seq_id, refs[tuple(r.prompt)])
            n = len(r.output)
            want = ref[n : n + len(self.drafted[r.seq_id].tokens)]
            self.drafted[r.seq_id].tokens = [(t + 1) % 160 if corrupt(n, j) else t for j, t in enumerate(want)]

    monkeypatch.setattr(SpeculativeDecoder, "_draft", drafted)


@pytest.mark.parametrize("kind", ["deepseek", "qwen3_next"])
def test_oracle_accepts_and_rolls_back(ckpts, monkeypatch, kind):
    """Perfect drafts except every third proposal: long accepted runs, partial ones (GDN rollback on Qwen3-Next)."""
    path, _ = ckpts(kind)
    long = _greedy(40)
    ref = _engine(path).generate(PROMPTS, long)
    spec = _engine(path, speculative_tokens=3)
    _oracle(monkeypatch, spec, {tuple(p): r for p, r in zip(PROMPTS, ref)}, lambda n, j: n % 3 == 1 and j == 1)
    # a shorter max_new_tokens ends requests inside an accepted run
    for max_new in (40, 7, 1):
        out = spec.generate(PROMPTS, _greedy(max_new))
        assert out == [r[:max_new] for r in ref]
        s = spec.stats.as_dict()["speculative"]
        if max_new == 40:
            assert 0 < s["accepted_tokens"] < s["proposed_tokens"]
            assert s["rollbacks"] > 0 if kind == "qwen3_next" else s["rollbacks"] == 0
            assert spec.stats.as_dict()["mean_accepted_tokens"] > 1


def test_gdn_rollback_is_needed(ckpts, monkeypatch):
    """Without restoring the recurrent state after a rejected draft the output diverges (the test above can fail)."""
    path, _ = ckpts("qwen3_next")
    ref = _engine(path).generate(PROMPTS, _greedy(24))
    spec = _engine(path, speculative_tokens=2)
    _oracle(monkeypatch, spec, {tuple(p): r for p, r in zip(PROMPTS, ref)}, lambda n, j: j == 1)
    monkeypatch.setattr(type(spec.state_pool), "restore", lambda *a, **k: None)
    assert spec.generate(PROMPTS, _greedy(24)) != ref


def test_stop_token_inside_draft(ckpts, monkeypatch):
    path, _ = ckpts("deepseek")
    ref = _engine(path).generate(PROMPTS, _greedy(30))
    # a token of each reference continuation after its first few; generation must stop right there
    stops = sorted({r[4] for r in ref})
    params = SamplingParams(max_new_tokens=30, stop_token_ids=tuple(stops))
    expected = []
    for r in ref:
        cut = next(i for i, t in enumerate(r) if t in stops)
        expected.append(r[: cut + 1])
    spec = _engine(path, speculative_tokens=3)
    _oracle(monkeypatch, spec, {tuple(p): r for p, r in zip(PROMPTS, ref)}, lambda n, j: False)
    outs = spec.complete(PROMPTS, params)
    assert [o.token_ids for o in outs] == expected
    assert all(o.finish_reason == "stop" for o in outs)


def test_stream_carries_every_accepted_token(ckpts, monkeypatch):
    path, _ = ckpts("deepseek")
    ref = _engine(path).generate([PROMPTS[0]], _greedy(12))[0]
    spec = _engine(path, speculative_tokens=3)
    _oracle(monkeypatch, spec, {tuple(PROMPTS[0]): ref}, lambda n, j: False)
    deltas = list(spec.stream(PROMPTS[0], _greedy(12)))
    assert [t for d in deltas for t in d.token_ids] == ref and len(deltas) < len(ref)


# ------------------------------------------------------------------------------------------------ draft-head parity
def _draft_logits(engine, ids: list[int]) -> torch.Tensor:
    """Our MTP logits for positions 0..len-2 (token ids[i+1] with the target's h[i])."""
    spec, seq = engine.speculative, 10**6
    engine.blocks.ensure(seq, len(ids))
    if engine.state_pool is not None:
        engine.state_pool.allocate(seq)
    try:
        hidden = spec._target_step([Work(seq, ids, 0)])
        spec.draft.bind_hidden_states(hidden[:-1])
        return spec.runner.step([Work(seq, ids[1:], 0)], all_positions=True).float()
    finally:
        engine._release_all([seq])


IDS = [3, 17, 42, 8, 99, 5, 61, 23, 77, 14, 150, 2]


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_deepseek_draft_matches_transformers_mtp(ckpts, target):
    """transformers' MtpModel (modeling_layers.py) with the same MTP weights: the DeepSeek-V3 formula
    post_norm(block(eh_proj([enorm(embed(t[i+1])); hnorm(h[i])]))) through the shared LM head."""
    from transformers.modeling_layers import MtpModel

    path, hf = ckpts("deepseek")
    mtp = MtpModel(hf, 1).eval()
    missing, unexpected = mtp.load_state_dict(hf.mtp_state, strict=False)
    assert not unexpected and all(not k.startswith("layers.") for k in missing)
    ids = torch.tensor([IDS])
    with torch.no_grad():
        h = hf.model(ids).last_hidden_state
        # transformers runs the MTP depth-0 queries one position ahead (MtpCache); RoPE is relative, so equal
        out = mtp.forward_layer(0, h[:, :-1], torch.arange(1, len(IDS))[None], None, input_ids=ids[:, 1:])
        want = hf.lm_head(out)[0].float()
    got = _draft_logits(_engine(path, target, speculative_tokens=1), IDS)
    torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_qwen3_next_draft_matches_reference(ckpts, target):
    """Hand-written reference of vLLM's Qwen3NextMultiTokenPredictor with HF modules: norm(layer(fc([pre_fc_norm_
    embedding(embed(t[i+1])); pre_fc_norm_hidden(h[i])]))), zero-centred norms, the target's LM head."""
    from transformers.masking_utils import create_causal_mask

    path, hf = ckpts("qwen3_next")
    t = hf.mtp_tensors
    norm_cls = type(hf.model.norm)

    def norm(name):
        n = norm_cls(hf.config.hidden_size, eps=hf.config.rms_norm_eps)
        n.weight.data.copy_(t[name])
        return n

    ids = torch.tensor([IDS])
    with torch.no_grad():
        h = hf.model(ids).last_hidden_state[:, :-1]
        emb = hf.model.embed_tokens(ids[:, 1:])
        x = torch.cat([norm("mtp.pre_fc_norm_embedding.weight")(emb), norm("mtp.pre_fc_norm_hidden.weight")(h)], -1)
        x = x @ t["mtp.fc.weight"].T
        pos = torch.arange(x.shape[1])[None]
        mask = create_causal_mask(config=hf.config, inputs_embeds=x, attention_mask=None, past_key_values=None,
                                  position_ids=pos)
        y = hf.mtp_block(x, attention_mask=mask, position_ids=pos,
                         position_embeddings=hf.model.rotary_emb(x, pos))
        y = y[0] if isinstance(y, tuple) else y
        want = hf.lm_head(norm("mtp.norm.weight")(y))[0].float()
    got = _draft_logits(_engine(path, target, speculative_tokens=1), IDS)
    torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)


# --------------------------------------------------------------------------------------------------------- sampling
def test_verify_rejection_rule_exact():
    """The rejection rule's output distribution equals the target's, computed exactly over every draft outcome."""
    torch.manual_seed(0)
    V = 6
    params = SamplingParams(temperature=1.0)
    p_logits, q_logits = torch.randn(2, V), torch.randn(V)
    p = p_logits[0].softmax(-1)
    q = q_logits.softmax(-1)
    # P(emit t) = q(t) min(1, p/q) + (1 - sum_x q(x) min(1, p(x)/q(x))) * residual(t)
    accept = torch.minimum(q, p)
    residual = (p - q).clamp_min(0)
    emitted = accept + (1 - accept.sum()) * residual / residual.sum()
    torch.testing.assert_close(emitted, p)
    # and the sampler implements it: many draws from verify() against the same p
    gen = torch.Generator().manual_seed(1)
    counts = torch.zeros(V)
    n = 20000
    for _ in range(n):
        x = int(torch.multinomial(q, 1, generator=gen))
        toks, _ = verify([x], p_logits, params, gen, [q])
        counts[toks[0]] += 1
    assert _chi2_pvalue(counts, p * n) > 1e-3


def _chi2_pvalue(observed: torch.Tensor, expected: torch.Tensor) -> float:
    keep = expected > 0
    stat = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    dof = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), torch.tensor(stat / 2.0)))


def _two_sample_pvalue(a: torch.Tensor, b: torch.Tensor) -> float:
    """Chi-square test of homogeneity of two count vectors (categories with too few counts pooled)."""
    total = a + b
    keep = total >= 10
    a2 = torch.cat([a[keep], a[~keep].sum(0, keepdim=True)])
    b2 = torch.cat([b[keep], b[~keep].sum(0, keepdim=True)])
    t2 = a2 + b2
    nz = t2 > 0
    a2, b2, t2 = a2[nz], b2[nz], t2[nz]
    na, nb = a2.sum(), b2.sum()
    ea, eb = t2 * na / (na + nb), t2 * nb / (na + nb)
    stat = float(((a2 - ea) ** 2 / ea).sum() + ((b2 - eb) ** 2 / eb).sum())
    dof = len(t2) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), torch.tensor(stat / 2.0)))


@pytest.mark.slow
def test_sampled_distribution_matches(ckpts):
    """Many seeds, few candidate tokens (top_k 6): the first three sampled tokens are distributed as without
    speculation (chi-square homogeneity per position, joint of the first two)."""
    path, _ = ckpts("deepseek")
    seeds = 400
    prompts = [[5, 6, 7, 8]] * seeds
    params = [SamplingParams(max_new_tokens=3, temperature=1.3, top_k=6, seed=s, ignore_eos=True)
              for s in range(seeds)]
    params_b = [SamplingParams(max_new_tokens=3, temperature=1.3, top_k=6, seed=10**6 + s, ignore_eos=True)
                for s in range(seeds)]
    plain = _engine(path, max_num_seqs=64).generate(prompts, params)
    spec_llm = _engine(path, max_num_seqs=64, speculative_tokens=2)
    spec = spec_llm.generate(prompts, params_b)
    assert spec_llm.stats.as_dict()["speculative"]["proposed_tokens"] > 0
    for pos in range(3):
        a = torch.bincount(torch.tensor([o[pos] for o in plain]), minlength=160).float()
        b = torch.bincount(torch.tensor([o[pos] for o in spec]), minlength=160).float()
        assert _two_sample_pvalue(a, b) > 1e-3, pos
    pair = lambda outs: torch.bincount(torch.tensor([o[0] * 160 + o[1] for o in outs]), minlength=160 * 160).float()
    assert _two_sample_pvalue(pair(plain), pair(spec)) > 1e-3


# ------------------------------------------------------------------------------------------------------------ errors
def test_missing_mtp_tensor_is_named(tmp_path):
    make_deepseek_mtp(tmp_path, drop=("eh_proj.weight",))
    with pytest.raises(MissingDraftWeights, match=r"eh_proj"):
        _engine(tmp_path, speculative_tokens=1)
    _engine(tmp_path)  # the main model loads without speculation


def test_checkpoint_without_mtp(tmp_path):
    from tests.deepseek_fixtures import make_deepseek

    make_deepseek(tmp_path, "v3")
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["num_nextn_predict_layers"] = 1
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MissingDraftWeights, match=r"no MTP head tensors \(model\.layers\.3\.\*\)"):
        _engine(tmp_path, speculative_tokens=1)
    cfg["num_nextn_predict_layers"] = 0
    cfg.pop("num_mtp_layers", None)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MissingDraftWeights, match="declares no MTP layers"):
        _engine(tmp_path, speculative_tokens=1)


def test_bad_k_and_unsupported_arch(tmp_path, ckpts):
    path, _ = ckpts("deepseek")
    with pytest.raises(ValueError, match=r"speculative_tokens = 4: expected an integer in \[1, 3\]"):
        _engine(path, speculative_tokens=4)
    from tests.llama_fixtures import make_llama  # noqa: F401 -- a spec without an mtp: section

    from modelgen.runtime.engine.speculative import load_draft_module

    with pytest.raises(ValueError, match="no multi-token-prediction head"):
        load_draft_module("modelgen.generated.rocm.llama")


def test_cli_run_speculative_json(ckpts):
    """`modelgen run --speculative-tokens K --json`: the same tokens as without, acceptance figures in the stats."""
    import subprocess
    import sys

    path, _ = ckpts("deepseek")

    def run(*extra):
        cmd = [sys.executable, "-m", "modelgen.cli", "run", "--checkpoint", str(path), "--prompt-ids", "5,6,7",
               "--prompt-ids", "9,10", "--max-new-tokens", "8", "--ignore-eos", "--json", *extra]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    plain, spec = run(), run("--speculative-tokens", "2")
    assert [o["token_ids"] for o in spec["outputs"]] == [o["token_ids"] for o in plain["outputs"]]
    assert 0 <= spec["stats"]["acceptance_rate"] <= 1 and spec["stats"]["mean_accepted_tokens"] is not None
    assert spec["stats"]["speculative"]["num_speculative_tokens"] == 2 and "acceptance_rate" not in plain["stats"]


# ------------------------------------------------------------------------- target hidden states: no hooks, graph replays
class _ReplayLikeGraphs:
    """Stands in for the rocm runner's DecodeGraphs on the CPU: one-token-per-sequence steps of up to 8 sequences,
    computed the way a CUDA-graph replay is -- through ``forward`` directly, so no Python hook on any module runs --
    with the decode metadata a graph bucket holds (one query per row, context ``position + 1``)."""

    def __init__(self, model, blocks):
        self.model, self.blocks, self.replays = model, blocks, 0

    def bucket_for(self, n: int):
        return 8 if n <= 8 else None

    def run(self, token_ids, positions, tables, state_slots=None, return_hidden=False):
        from modelgen.runtime.work import pad_tables
        from modelgen.runtime.layers.attention import AttentionMetadata

        self.replays += 1
        bs, n = self.blocks.block_size, len(token_ids)
        width = max(map(len, tables))
        meta = AttentionMetadata(
            is_prefill=False,
            slot_mapping=torch.tensor([t[p // bs] * bs + p % bs for p, t in zip(positions, tables)]),
            cu_seqlens_q=torch.arange(n + 1, dtype=torch.int32),
            context_lens=torch.tensor([p + 1 for p in positions], dtype=torch.int32),
            block_tables=torch.tensor(pad_tables(tables, width), dtype=torch.int32), max_seqlen_q=1,
        )
        inner = self.model.model
        hidden = type(inner).forward(inner, torch.tensor(token_ids), torch.tensor(positions), meta)
        logits = self.model.compute_logits(hidden)
        return (logits, hidden) if return_hidden else logits


def test_target_hidden_states_without_hooks(ckpts, monkeypatch):
    """The target's hidden states must not depend on Python hooks: a CUDA-graph replay runs none, and a runner may
    call ``forward`` directly (on the H200 the hook-based reader gave acceptance 0 and diverging greedy output).
    Here the target's forward bypasses ``__call__`` (no hooks fire), registering a hook on it fails the test, and
    decode steps without drafts go through a replay-like stand-in for the CUDA graphs: greedy output must still be
    plain greedy decoding's."""
    path, _ = ckpts("deepseek")
    ref = _engine(path).generate(PROMPTS, _greedy())
    spec = _engine(path, speculative_tokens=2)
    inner = spec.model.model
    monkeypatch.setattr(spec.model, "forward", lambda ids, pos, meta: type(inner).forward(inner, ids, pos, meta))
    monkeypatch.setattr(inner, "register_forward_hook",
                        lambda *a, **k: pytest.fail("speculative decoding must not read hidden states via hooks"))
    spec.runner.graphs = graphs = _ReplayLikeGraphs(spec.model, spec.blocks)
    assert spec.generate(PROMPTS, _greedy()) == ref
    assert graphs.replays > 0  # the last token of each request comes from a step without drafts: a "replay"
    assert spec.stats.as_dict()["speculative"]["proposed_tokens"] > 0


def test_runner_return_hidden_matches_logits(ckpts):
    """``step(return_hidden=True)``: the hidden states of every fed token, whose LM-head rows are the step's logits
    (rocm eager, rocm replay-like graphs, neuron)."""
    path, _ = ckpts("deepseek")
    ids = [3, 17, 42, 8, 99]
    for target in ("rocm", "neuron"):
        engine = _engine(path, target)
        seq = 7
        engine.blocks.ensure(seq, len(ids) + 1)
        try:
            want = engine.runner.step([Work(seq, ids, 0)], all_positions=True)
            _, hidden = engine.runner.step([Work(seq, ids, 0)], return_hidden=True)
            assert hidden.shape[0] == len(ids)
            torch.testing.assert_close(_lm_head(engine, hidden), want, atol=1e-5, rtol=1e-5)
            if target == "rocm":
                engine.runner.graphs = _ReplayLikeGraphs(engine.model, engine.blocks)
                logits, h1 = engine.runner.step([Work(seq, [5], len(ids))], return_hidden=True)
                eager = engine.runner.step([Work(seq, [5], len(ids))], all_positions=True)
                torch.testing.assert_close(logits, eager, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(engine.model.compute_logits(h1), eager, atol=1e-5, rtol=1e-5)
        finally:
            engine._release_all([seq])


def _lm_head(engine, hidden):
    """The target's LM head on hidden rows (a neuron model computes its logits inside forward, with NF.lm_head)."""
    model = engine.model
    if hasattr(model, "compute_logits"):
        return model.compute_logits(hidden)
    import modelgen.runtime.targets.neuron.functional as NF

    return NF.lm_head(hidden, model.lm_head_weight, model.vocab_size)


# ----------------------------------------------------------------------------------- the GPU path (Triton kernels)
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() and not __import__("tests.gpu_helpers").gpu_helpers.INTERPRET,
                    reason="needs a CUDA GPU, or TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1 (Triton's interpreter)")
def test_greedy_equal_on_gpu_path(ckpts, monkeypatch):
    """DeepSeek-V3 speculation through the Triton kernels (MLA decode, MoE, norms, RoPE; on a GPU also the CUDA
    graphs of draft-free decode steps, which now return the hidden states): a random head leaves greedy output
    unchanged, and oracle drafts (accepted runs, a corrupted draft mid-run) too. fp32, so equality is exact rather
    than up to bf16 rounding. Runs on the CPU under ``TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1``."""
    from tests.gpu_helpers import DEV

    path, _ = ckpts("deepseek")
    prompts = PROMPTS[:2]
    ref = _engine(path, device=DEV).generate(prompts, _greedy(8))
    spec = _engine(path, device=DEV, speculative_tokens=2)
    assert spec.generate(prompts, _greedy(8)) == ref
    _oracle(monkeypatch, spec, {tuple(p): r for p, r in zip(prompts, ref)}, lambda n, j: n % 3 == 1 and j == 1)
    assert spec.generate(prompts, _greedy(8)) == ref
    s = spec.stats.as_dict()["speculative"]
    assert 0 < s["accepted_tokens"] < s["proposed_tokens"]


def test_gdn_rollback_keeps_verify_windows_short(ckpts, monkeypatch):
    """After a rejected draft the recurrent state is restored and re-advanced in the same step, so every verify
    window stays the last token + K drafts: re-feeding the kept tokens with the next drafts instead made each of a
    run of rejected steps one token longer (a random head rejects nearly every step: windows grew to the whole
    output)."""
    path, _ = ckpts("qwen3_next")
    ref = _engine(path).generate(PROMPTS, _greedy(14))
    spec = _engine(path, speculative_tokens=2)
    sizes = []
    original = SpeculativeDecoder._target_step

    def recording(self, work):
        sizes.append(max(len(w.token_ids) for w in work))
        return original(self, work)

    monkeypatch.setattr(SpeculativeDecoder, "_target_step", recording)
    assert spec.generate(PROMPTS, _greedy(14)) == ref
    assert spec.stats.as_dict()["speculative"]["rollbacks"] > 0
    assert max(sizes[1:]) <= 3  # after the prompts: the last token and at most 2 drafts
