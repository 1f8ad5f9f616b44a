"""Speculative decoding with engine-started tensor-parallel ranks (``LLM(speculative_tokens=K,
tensor_parallel_size=2)``, gloo on the CPU): rank 0 announces each model call of a speculative step (target verify,
GDN re-advance after a rollback, MTP draft, chained draft) with launch.py's SPEC message and the follower runs the
same call (``SpeculativeDecoder.follow``), so the collectives of the target, its LM head and the draft pair up.
Greedy output equals TP = 1 without speculation; oracle drafts exercise accepted runs and GDN rollbacks on both
ranks (a follower that did not restore its state shard would part the outputs)."""
from __future__ import annotations

import warnings

import pytest
import torch.distributed as dist

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.parallel import launch
from tests.test_speculative import PROMPTS, _oracle, ckpts  # noqa: F401 (the checkpoints fixture)

pytestmark = [
    pytest.mark.filterwarnings("ignore"),
    pytest.mark.skipif(not hasattr(launch, "SPEC"),
                       reason="runtime/parallel/launch.py has no SPEC command yet (followers cannot mirror the calls)"),
]


def _llm(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return LLM(path, dtype="float32", max_model_len=128, max_num_seqs=8, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["deepseek", "qwen3_next"])
def test_speculative_tp2_equals_tp1_plain(ckpts, monkeypatch, kind):
    path, _ = ckpts(kind)
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    ref = _llm(path).generate(PROMPTS, params)
    llm = _llm(path, tensor_parallel_size=2, speculative_tokens=2)
    try:
        assert dist.is_initialized() and dist.get_world_size() == 2
        assert llm.generate(PROMPTS, params) == ref  # random head: rejections (and GDN rollbacks)
        _oracle(monkeypatch, llm, {tuple(p): r for p, r in zip(PROMPTS, ref)}, lambda n, j: n % 3 == 1 and j == 1)
        assert llm.generate(PROMPTS, params) == ref
        s = llm.stats.as_dict()["speculative"]
        assert 0 < s["accepted_tokens"] < s["proposed_tokens"]
        assert s["rollbacks"] > 0 if kind == "qwen3_next" else s["rollbacks"] == 0
    finally:
        llm.close()
    assert not dist.is_initialized()
