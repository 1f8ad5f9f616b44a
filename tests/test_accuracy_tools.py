"""Unit tests of the accuracy tooling (modelgen.runtime.testing.accuracy): the three-way gate passes what it should,
fails what it should with a readable one-line message, and the golden top-k check is order-robust but strict."""
from __future__ import annotations

import math

import pytest
import torch

from modelgen.runtime.testing import (
    assert_close_three_way,
    assert_matches_golden_topk,
    golden_topk,
    three_way_report,
)


def _triple(seed: int = 0, shape=(6, 40)):
    """gold fp32, floor = gold rounded to bf16 (the error the dtype alone introduces)."""
    g = torch.Generator().manual_seed(seed)
    gold = torch.randn(*shape, generator=g) * 3
    floor = gold.to(torch.bfloat16).float()
    return gold, floor


def test_report_numbers_by_hand():
    gold = torch.tensor([[0.0, 1.0, 2.0], [3.0, 1.0, 0.0]])
    floor = gold + torch.tensor([[0.1, 0.0, 0.0], [0.0, -0.2, 0.0]])
    ours = gold + torch.tensor([[0.0, 0.0, 0.3], [0.0, 0.0, 3.5]])  # row 1's argmax moves from 0 to 2
    r = three_way_report(gold, floor, ours, factor=2.0, atol=0.01, name="hand")
    assert r.floor_max == pytest.approx(0.2)
    assert r.ours_max == pytest.approx(3.5)
    assert r.ours_mean == pytest.approx(3.8 / 6)
    assert r.floor_mean == pytest.approx(0.3 / 6)
    assert r.bound == pytest.approx(0.41)
    assert r.worst_index == (1, 2)
    assert (r.worst_gold, r.worst_ours) == (pytest.approx(0.0), pytest.approx(3.5))
    assert r.argmax_ours == 0.5 and r.argmax_floor == 1.0
    assert not r.passed
    d = r.as_dict()
    assert d["passed"] is False and d["bound"] == pytest.approx(0.41)


def test_passes_when_ours_is_as_good_as_the_floor():
    gold, floor = _triple()
    # ours = a different bf16 rounding path (round-half-down-ish perturbation inside one bf16 ulp)
    ours = (gold + (floor - gold) * 0.5).to(torch.bfloat16).float()
    r = assert_close_three_way(gold, floor, ours, name="same-precision")
    assert r.passed and r.ours_max <= r.bound
    assert "ok" in r.summary()


def test_fails_when_ours_is_three_times_the_floor():
    gold, floor = _triple()
    ours = gold + 3.0 * (floor - gold)  # every element 3x the dtype error: a real bug at bf16 scale
    with pytest.raises(AssertionError) as e:
        assert_close_three_way(gold, floor, ours, atol=0.0, name="attn_prefill")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("attn_prefill: FAILED")
    assert "max|floor-gold|" in msg and "worst at [" in msg and "gold " in msg and "ours " in msg
    # The same ours passes at a factor above 3: the gate is the factor, not an absolute tolerance.
    assert_close_three_way(gold, floor, ours, factor=3.01, atol=0.0)


def test_single_outlier_is_located():
    gold, floor = _triple()
    ours = floor.clone()
    ours[4, 17] += 1.0
    with pytest.raises(AssertionError, match=r"worst at \[4, 17\]"):
        assert_close_three_way(gold, floor, ours, name="mlp")
    r = three_way_report(gold, floor, ours)
    assert r.worst_index == (4, 17)
    assert r.worst_ours == pytest.approx(floor[4, 17].item() + 1.0)


def test_atol_covers_an_exact_floor():
    """A floor of exactly 0 (bf16 represents the gold exactly) still allows atol of error."""
    gold = torch.tensor([1.0, 2.0, 0.5])
    assert_close_three_way(gold, gold, gold + 0.005, atol=1e-2)
    with pytest.raises(AssertionError):
        assert_close_three_way(gold, gold, gold + 0.02, atol=1e-2)


def test_nan_in_ours_fails_and_nan_in_gold_is_an_error():
    gold, floor = _triple()
    ours = floor.clone()
    ours[2, 3] = float("nan")
    r = three_way_report(gold, floor, ours)
    assert not r.passed and math.isinf(r.ours_max) and r.worst_index == (2, 3)
    with pytest.raises(AssertionError, match=r"worst at \[2, 3\]"):
        assert_close_three_way(gold, floor, ours)
    bad = gold.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="gold holds NaN at \\(0, 0\\)"):
        three_way_report(bad, floor, floor)


def test_matching_infinities_are_not_errors():
    """Masked logits (-inf where a logit_mask forbids a token) are equal in all three, not NaN differences."""
    gold = torch.tensor([[1.0, float("-inf"), 0.5]])
    assert_close_three_way(gold, gold.clone(), gold.clone(), atol=0.0)
    ours = gold.clone()
    ours[0, 1] = 0.0  # the mask was lost
    with pytest.raises(AssertionError, match="inf"):
        assert_close_three_way(gold, gold.clone(), ours)


def test_shape_mismatch_and_bad_factor_are_one_line_errors():
    gold, floor = _triple()
    with pytest.raises(ValueError, match=r"^x: shapes differ: gold \(6, 40\), floor \(6, 40\), ours \(6, 39\)$"):
        three_way_report(gold, floor, floor[:, :39], name="x")
    with pytest.raises(ValueError, match="factor 0.5 < 1"):
        three_way_report(gold, floor, floor, factor=0.5)


def test_argmax_flip_of_a_near_tie_is_reported_not_failed():
    """A near-tie (gap below the bf16 noise) may flip; the gate is the error bound, the flip shows in the report."""
    gold = torch.tensor([[5.0, 1.0, 0.0], [1.0, 1.001, 0.0]])
    floor = gold + 0.01
    ours = gold.clone()
    ours[1] = torch.tensor([1.001, 1.0, 0.0])
    r = assert_close_three_way(gold, floor, ours)
    assert r.argmax_ours == 0.5 and r.argmax_floor == 1.0
    assert "argmax agreement ours 50.0%, floor 100.0%" in r.summary()


def test_golden_topk_roundtrip_and_failures():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 50, generator=g)
    golden = golden_topk(logits, k=5)
    assert len(golden["ids"]) == 3 and all(len(r) == 5 for r in golden["ids"])
    assert_matches_golden_topk(logits + 1e-5, golden, atol=1e-4)
    # Swapping two near-tied entries of the top 5 is not a failure (order among ties is not pinned).
    swapped = logits.clone()
    a, b = golden["ids"][0][1], golden["ids"][0][2]
    swapped[0, a], swapped[0, b] = logits[0, b], logits[0, a]
    if abs(logits[0, a] - logits[0, b]) <= 1e-4:
        assert_matches_golden_topk(swapped, golden, atol=1e-4)
    # A golden token's value off by more than atol fails and names the row and token.
    off = logits.clone()
    off[2, golden["ids"][2][0]] -= 0.01
    with pytest.raises(AssertionError, match=rf"row 2: logit of golden top-1 token {golden['ids'][2][0]}"):
        assert_matches_golden_topk(off, golden, atol=1e-3)
    # An outsider rising into the top k fails even though every golden token kept its value.
    intruder = logits.clone()
    outsider = next(i for i in range(50) if i not in golden["ids"][1])
    intruder[1, outsider] = logits[1].max() + 1.0
    with pytest.raises(AssertionError, match="row 1: top-1 value .* entered it"):
        assert_matches_golden_topk(intruder, golden, atol=1e-3)


# --------------------------------------------------------------------------------------- tensor_capture / replacement
PROMPT_A = [1, 17, 42, 99, 3, 150, 64, 8, 23, 77]
PROMPT_B = [1, 5, 130, 12, 88, 41, 7, 19, 140, 60]  # same length as A: its layer outputs fit A's run


def _hf_run(hf, ids, names):
    from modelgen.runtime.debug import tensor_capture

    with torch.no_grad(), tensor_capture(hf, names) as cap:
        out = hf(torch.tensor([ids]), output_hidden_states=True)
    return out, cap


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_capture_matches_hf_layer_by_layer(llama_checkpoint, target):
    from modelgen.runtime.debug import first_divergence, layer_output, tensor_capture
    from modelgen.runtime.engine.llm import LLM

    path, hf = llama_checkpoint("gqa")
    out, ref = _hf_run(hf, PROMPT_A, "model.layers.*")
    # The capture itself is right: HF's own hidden_states[i + 1] is the output of layer i (the last entry is after
    # the final norm, so only the layers before the last are compared).
    names = [f"model.layers.{i}" for i in range(hf.config.num_hidden_layers)]
    for i, n in enumerate(names[:-1]):
        assert torch.equal(ref.one(n), out.hidden_states[i + 1]), f"HF capture of {n} != hidden_states[{i + 1}]"

    llm = LLM(path, target=target, dtype="float32", max_model_len=64)
    with tensor_capture(llm.model, "model.layers.*") as cap:
        llm.score(PROMPT_A)
    assert list(cap) == names
    if target == "rocm":  # the fused-residual convention: (hidden, residual) pairs
        assert isinstance(cap.one(names[0]), tuple)
    else:  # neuron pads tokens to the 16-token bucket
        assert cap.one(names[0]).shape[0] == 16
    first, table = first_divergence(cap, ref, list(zip(names, names)), atol=1e-4, rows=len(PROMPT_A))
    assert first is None, f"{target}: first divergence at {first}: {table}"
    assert layer_output(cap.one(names[1]))[: len(PROMPT_A)].shape == (len(PROMPT_A), hf.config.hidden_size)


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_replacing_a_layer_output_with_hf_makes_downstream_follow(llama_checkpoint, target):
    """Run ours on prompt A but inject HF's layer-0 output for prompt B: everything after layer 0 (layer 1's
    attention over the injected stream, final norm, LM head) then computes HF's logits for B, not A."""
    from modelgen.runtime.debug import replace_layer_output, tensor_replacement
    from modelgen.runtime.engine.llm import LLM

    path, hf = llama_checkpoint("gqa")
    out_b, ref_b = _hf_run(hf, PROMPT_B, "model.layers.0")
    with torch.no_grad():
        logits_a = hf(torch.tensor([PROMPT_A])).logits[0]
    logits_b = out_b.logits[0]
    llm = LLM(path, target=target, dtype="float32", max_model_len=64)
    with tensor_replacement(llm.model, {"model.layers.0": replace_layer_output(ref_b.one("model.layers.0")[0])}) as n:
        got = llm.score(PROMPT_A).float()
    assert n == {"model.layers.0": 1}
    assert (got - logits_b).abs().max().item() < 1e-4, "downstream of the injected layer does not follow HF"
    assert (got - logits_a).abs().max().item() > 1e-2, "the replacement did not change the logits"
    # Outside the block the model is untouched again.
    assert (llm.score(PROMPT_A).float() - logits_a).abs().max().item() < 1e-4


def test_replacement_bisects_an_injected_fault(llama_checkpoint):
    """A fault injected into layer 1's MLP (a stray +0.01 bias) is located by first_divergence at layer 1, not layer 0."""
    from modelgen.runtime.debug import first_divergence, tensor_capture, tensor_replacement
    from modelgen.runtime.engine.llm import LLM

    path, hf = llama_checkpoint("gqa")
    _, ref = _hf_run(hf, PROMPT_A, "model.layers.*")
    llm = LLM(path, target="rocm", dtype="float32", max_model_len=64)
    names = ["model.layers.0", "model.layers.1"]
    with tensor_replacement(llm.model, {"model.layers.1.mlp": lambda out: out + 1e-2}), \
            tensor_capture(llm.model, names) as cap:
        llm.score(PROMPT_A)
    first, table = first_divergence(cap, ref, list(zip(names, names)), atol=1e-4)
    assert first == "model.layers.1", table
    assert table[0][1] < 1e-4 < table[1][1]


def test_debug_errors_are_one_line(llama_checkpoint):
    from modelgen.runtime.debug import tensor_capture, tensor_replacement
    from modelgen.runtime.engine.llm import LLM

    path, _ = llama_checkpoint("gqa")
    llm = LLM(path, target="rocm", dtype="float32", max_model_len=64)
    with pytest.raises(KeyError, match=r"no module matching 'model.layer.0'; closest: model.layers.0"):
        with tensor_capture(llm.model, ["model.layer.0"]):
            pass
    with pytest.raises(KeyError, match="no module matching 'model.layers.9.\\*'"):
        with tensor_capture(llm.model, ["model.layers.9.*"]):
            pass
    with pytest.raises(KeyError, match="exact module names, not patterns"):
        with tensor_replacement(llm.model, {"model.layers.*": torch.zeros(1)}):
            pass
    with pytest.raises(TypeError, match="returns a 2-tuple, not a tensor; pass a tuple"):
        with tensor_replacement(llm.model, {"model.layers.0": torch.zeros(10, 64)}):
            llm.score(PROMPT_A)
    with pytest.raises(ValueError, match=r"output has shape \(10, 64\), replacement \(10, 63\)"):
        with tensor_replacement(llm.model, {"model.layers.0.mlp": torch.zeros(10, 63)}):
            llm.score(PROMPT_A)
    # The hooks were removed when the failing blocks exited: the model runs normally.
    assert not any(m._forward_hooks for m in llm.model.modules())


def test_captured_inputs_replay_the_module(llama_checkpoint):
    """``inputs=True`` records each call's positional inputs: replaying the module on them gives the captured
    output (module-level replay of what the model saw, e.g. to bisect inside a block)."""
    from modelgen.runtime.debug import tensor_capture
    from modelgen.runtime.engine.llm import LLM

    path, _ = llama_checkpoint("gqa")
    llm = LLM(path, target="neuron", dtype="float32", max_model_len=64)
    with tensor_capture(llm.model, "model.layers.*.mlp", inputs=True) as cap:
        llm.score(PROMPT_A)
    assert list(cap.inputs) == ["model.layers.0.mlp", "model.layers.1.mlp"]
    (x,) = cap.inputs["model.layers.1.mlp"][0]
    with torch.inference_mode():
        assert torch.equal(llm.model.model.layers[1].mlp(x), cap.one("model.layers.1.mlp"))
    with pytest.raises(KeyError, match="'model.norm' was not captured"):
        cap.one("model.norm")
