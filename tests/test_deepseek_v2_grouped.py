"""DeepSeek-V2 ``topk_method: group_limited_greedy`` (moe router ``group_score: max``) vs transformers 5, which
implements it in ``DeepseekV2TopkRouter``: softmax scores, each of ``n_group`` groups ranked by its *maximum* score
(DeepSeek-V3's ``noaux_tc`` ranks by the sum of the top two), the ``topk_group`` best groups kept, the other groups'
scores zeroed, top-k of the rest, weights never renormalised, times ``routed_scaling_factor``.

* the op: ``route(..., scoring="softmax", group_score="max")`` against HF's router module on random hidden states
  (same experts, same weights), and a hand-made case where ranking groups by max and by top-2 sum disagree;
* the model: a tiny DeepseekV2ForCausalLM with 16 experts in 4 groups (keep 2, top-3) on both targets: fp32 logits
  within 1e-4 and 16 greedy tokens, bf16 three-way; the same weights routed greedily give other logits, so the test
  sees the grouping.
"""
from __future__ import annotations

import copy

import pytest
import torch

from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.layers.moe.ops import route
from modelgen.runtime.testing import assert_close_three_way
from tests.deepseek_fixtures import make_deepseek
from tests.parity_helpers import hf_greedy_forward, hf_logits, llm
from tests.test_parity_llama import PROMPT, THREE_WAY_FACTOR

TARGETS = ["rocm", "neuron"]
GROUPED = dict(topk_method="group_limited_greedy", n_routed_experts=16, n_group=4, topk_group=2, num_experts_per_tok=3,
               routed_scaling_factor=1.5)


def _hf_router(seed: int = 0):
    import transformers
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2TopkRouter

    config = transformers.DeepseekV2Config(hidden_size=32, **GROUPED)
    torch.manual_seed(seed)
    router = DeepseekV2TopkRouter(config)
    with torch.no_grad():
        router.weight.normal_(0, 1.0)
    return router


def test_route_equals_hf_router():
    router = _hf_router()
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(1))
    logits, hf_weights, hf_ids = router(x)
    weights, ids = route(logits, 3, scoring="softmax", renormalize=False, n_group=4, topk_group=2, group_score="max",
                         routed_scaling_factor=1.5)
    # HF's ids come in topk(sorted=False) order: compare per token as expert -> weight maps
    for t in range(x.shape[0]):
        ours = dict(zip(ids[t].tolist(), weights[t].tolist()))
        theirs = dict(zip(hf_ids[t].tolist(), hf_weights[t].tolist()))
        assert ours.keys() == theirs.keys(), t
        assert all(abs(ours[e] - theirs[e]) < 1e-6 for e in ours), t
    plain = route(logits, 3, scoring="softmax", renormalize=False, routed_scaling_factor=1.5)[1]
    differs = sum(set(a.tolist()) != set(b.tolist()) for a, b in zip(plain, ids))
    assert differs > 0, "no token where the group limit changes the choice: the comparison proves nothing"


def test_group_max_and_top2_sum_rank_groups_differently():
    """Group 0 holds one strong expert (max wins), group 1 two fairly strong ones (top-2 sum wins)."""
    probs = torch.tensor([[0.40, 0.05, 0.01, 0.01, 0.25, 0.24, 0.02, 0.02]])
    logits = probs.log()
    kw = dict(scoring="softmax", renormalize=False, n_group=2, topk_group=1)
    by_max = route(logits, 2, group_score="max", **kw)[1]
    by_sum = route(logits, 2, group_score="top2_sum", **kw)[1]
    assert set(by_max[0].tolist()) == {0, 1} and set(by_sum[0].tolist()) == {4, 5}
    with pytest.raises(ValueError, match="group_score"):
        route(logits, 2, group_score="mean", **kw)


@pytest.fixture(scope="module")
def grouped_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("deepseek_v2_grouped")
    return path, make_deepseek(path, "v2", **GROUPED)


@pytest.mark.parametrize("target", TARGETS)
def test_against_hf_fp32(grouped_checkpoint, target):
    path, hf = grouped_checkpoint
    model = llm(path, target, strict_config=True)
    err = (model.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < 1e-4, f"{target}: prefill logits differ by {err}"
    out = model.generate([PROMPT], SamplingParams(max_new_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy_forward(hf, PROMPT, 16)


@pytest.mark.parametrize("target", TARGETS)
def test_against_hf_bf16_three_way(grouped_checkpoint, target):
    path, hf = grouped_checkpoint
    gold = hf_logits(hf, PROMPT)
    floor = hf_logits(copy.deepcopy(hf).to(torch.bfloat16), PROMPT)
    ours = llm(path, target, dtype="bfloat16").score(PROMPT).float()
    assert_close_three_way(gold, floor, ours, factor=THREE_WAY_FACTOR, atol=1e-2, name=f"v2_grouped/{target}")


def test_grouping_changes_the_logits(grouped_checkpoint):
    """The same weights routed greedily (HF, topk_method flipped) give other logits than group_limited_greedy."""
    _, hf = grouped_checkpoint
    greedy = copy.deepcopy(hf)
    for layer in greedy.model.layers:
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None:
            gate.topk_method = "greedy"
    assert (hf_logits(greedy, PROMPT) - hf_logits(hf, PROMPT)).abs().max().item() > 1e-3


@pytest.mark.parametrize("overrides, message", [
    (dict(topk_method="group_limited_greedy"), "group_limited_greedy needs n_group and topk_group"),
    (dict(topk_method="noaux_tc", n_group=2, topk_group=1), "topk_method must be greedy or group_limited_greedy"),
])
def test_unsupported_topk_configs_are_refused(tmp_path, overrides, message):
    from modelgen.runtime.hf_config import ConfigError

    make_deepseek(tmp_path, "v2", **overrides)
    with pytest.raises(ConfigError, match=message):
        llm(tmp_path, "rocm")
