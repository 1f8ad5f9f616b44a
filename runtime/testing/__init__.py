"""Accuracy tooling for parity tests and benches (the vLLM Neuron onboarding guide's "Validate accuracy" section).

``modelgen.runtime.testing.accuracy``: the three-way comparison (HF fp32 gold, HF low-precision floor, modelgen
low-precision) and golden top-k logit references. Debug hooks live in ``modelgen.runtime.debug``.
"""
from __future__ import annotations

from .accuracy import (
    ThreeWayReport,
    assert_close_three_way,
    assert_matches_golden_topk,
    golden_topk,
    three_way_report,
)

__all__ = ["ThreeWayReport", "assert_close_three_way", "assert_matches_golden_topk", "golden_topk", "three_way_report"]
