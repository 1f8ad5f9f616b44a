"""Speculative decoding with CUDA graphs on a GPU (runtime/targets/rocm/cuda_graphs.py ``StepGraphs``): the verify
step (K+1 tokens per sequence: MLA as decode rows, GQA as a fixed varlen prefill) and the MTP draft's steps replay
captured graphs, and greedy output equals plain greedy decoding token for token (float32, so equality is not up to
bf16 rounding). Qwen3-Next (Gated DeltaNet) graphs its verify step too (varlen attention; the GDN layers run the
whole window in kernels.window_decode from the bucket's state slots), with rollbacks. Skipped without CUDA (the
bookkeeping is tested on the CPU by tests/test_speculative_graphs.py with a recorded-callable "graph")."""
from __future__ import annotations

import warnings

import pytest
import torch

from modelgen.runtime.engine.sampler import SamplingParams
from tests.parity_helpers import llm as make_llm
from tests.test_speculative import PROMPTS, _oracle, ckpts  # noqa: F401 (the checkpoints fixture)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.filterwarnings("ignore")]


def _engine(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_llm(path, "rocm", device="cuda", dtype="float32", max_num_seqs=8, **kw)


def _greedy(n):
    return SamplingParams(max_new_tokens=n, ignore_eos=True)


@pytest.mark.parametrize("kind", ["deepseek", "glm4_moe_plain", "qwen3_next"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_graphed_speculative_greedy_equals_plain(ckpts, monkeypatch, kind, k):
    path, _ = ckpts(kind)
    captured = []
    if kind == "qwen3_next":  # the verify window's GDN layers run window_decode inside the captured verify graph
        from modelgen.runtime.layers.gated_deltanet import kernels as ggd

        real = ggd.window_decode

        def counting(*a, **kw):
            captured.append(torch.cuda.is_current_stream_capturing())
            return real(*a, **kw)

        monkeypatch.setattr(ggd, "window_decode", counting)
    plain = _engine(path)
    assert plain.runner.graphs is not None  # the Triton kernels are on: decode replays graphs
    ref = plain.generate(PROMPTS, _greedy(16))
    spec = _engine(path, speculative_tokens=k)
    sd = spec.speculative
    assert sd.draft_graphs is not None and sd.verify_graphs is not None
    assert spec.generate(PROMPTS, _greedy(16)) == ref
    replays = sd.graph_replays()
    assert replays["draft"] > 0 and replays["verify"] > 0
    assert replays["draft_chain"] is None if k == 1 else replays["draft_chain"] > 0
    # Oracle drafts corrupted mid-run: accepted runs, partial acceptances, requests ending inside a run.
    _oracle(monkeypatch, spec, {tuple(p): r for p, r in zip(PROMPTS, ref)}, lambda n, j: n % 3 == 1 and j == k - 1)
    for max_new in (16, 5):
        assert spec.generate(PROMPTS, _greedy(max_new)) == [r[:max_new] for r in ref]
    s = spec.stats.as_dict()["speculative"]
    assert s["accepted_tokens"] > 0
    after = sd.graph_replays()
    assert after["draft"] > replays["draft"] and after["verify"] > replays["verify"]
    if kind == "qwen3_next":
        assert any(captured)
        assert s["rollbacks"] > 0  # partial acceptances restored and re-advanced the states around graphed steps


def test_graphs_off_by_env(ckpts, monkeypatch):
    """MODELGEN_SPEC_GRAPHS=0 keeps speculative steps eager (bench/mtp.py's eager row); same greedy output."""
    path, _ = ckpts("deepseek")
    ref = _engine(path).generate(PROMPTS, _greedy(8))
    monkeypatch.setenv("MODELGEN_SPEC_GRAPHS", "0")
    spec = _engine(path, speculative_tokens=2)
    assert spec.speculative.verify_graphs is None and spec.speculative.draft_graphs is None
    assert spec.generate(PROMPTS, _greedy(8)) == ref


def test_graphed_batch_beyond_buckets(ckpts):
    """More running sequences than the largest speculative bucket run eagerly; smaller steps replay."""
    path, _ = ckpts("glm4_moe_plain")
    prompts = PROMPTS * 3
    ref = _engine(path, decode_buckets=[1, 2, 4]).generate(prompts, _greedy(10))
    spec = _engine(path, speculative_tokens=2, decode_buckets=[1, 2, 4])
    assert spec.generate(prompts, _greedy(10)) == ref
    assert spec.speculative.graph_replays()["verify"] > 0
