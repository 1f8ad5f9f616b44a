"""Every spec in specs/ against transformers through `modelgen verify`'s machinery (cli/verify.py): parity tests
generated from the specs instead of hand-listed, so a new spec is tested by being committed. Per spec and
architecture, on both targets: every config.json key read or ignored (strict), fp32 prefill logits, 16 greedy tokens
(first test), and the bf16 three-way check (second). Tiny models: runtime/testing/tiny_models.py. Measured on the
2-core machine: 23 specs in 31 s (fp32) and 21 s (bf16)."""
from __future__ import annotations

import pytest

from modelgen.codegen.spec_file import REPO_ROOT
from modelgen.cli.verify import verify_spec
from modelgen.runtime.targets import ENGINE_TARGETS as TARGETS  # verify runs what modelgen's engine runs

SPECS = sorted((REPO_ROOT / "specs").glob("*.yaml"))
# bf16 outcomes that are precision, not code: the tiny Qwen3.5-MoE (VL wrapper) has a router near-tie at layer 3,
# token 18 (2nd vs 3rd expert logits 0.0004 apart in fp32), so bf16 may route that token to another expert; the
# worst error (0.0217 against a 0.0191 bound on rocm) is at exactly that token, every other position is in bounds.
BF16_NEAR_TIES = {"qwen3_5_moe"}


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_spec_matches_transformers_fp32(spec):
    report = verify_spec(spec, TARGETS, bf16=False)
    assert report.passed, report.format()


@pytest.mark.parametrize("spec", [
    pytest.param(s, id=s.stem, marks=[pytest.mark.xfail(reason="bf16 router near-tie (see BF16_NEAR_TIES)",
                                                        strict=False)] if s.stem in BF16_NEAR_TIES else [])
    for s in SPECS
])
def test_spec_matches_transformers_bf16_three_way(spec):
    report = verify_spec(spec, TARGETS, bf16=True)
    assert report.passed, report.format()
