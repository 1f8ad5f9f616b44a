"""Every spec in specs/ against transformers through `modelgen verify`'s machinery (cli/verify.py): parity tests
generated from the specs instead of hand-listed, so a new spec is tested by being committed. Per spec and
architecture, on both targets: every config.json key read or ignored (strict), fp32 prefill logits, 16 greedy tokens
(first test), and the bf16 three-way check (second), from one verify run per spec (the second test reads the first's
report). Tiny models: runtime/testing/tiny_models.py."""
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


BF16 = "bf16 3-way"


@pytest.fixture(scope="module")
def reports():
    """``get(spec) -> VerifyReport``: one verify run per spec (the bf16 pass includes every fp32 check, so the two tests
    below read one report instead of verifying each spec twice)."""
    cache: dict = {}

    def get(spec):
        if spec not in cache:
            cache[spec] = verify_spec(spec, TARGETS, bf16=True)
        return cache[spec]

    return get


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_spec_matches_transformers_fp32(reports, spec):
    report = reports(spec)
    failed = [c for c in report.checks if c.name != BF16 and not c.passed]
    assert report.checks and not failed, report.format()


@pytest.mark.parametrize("spec", [
    pytest.param(s, id=s.stem, marks=[pytest.mark.xfail(reason="bf16 router near-tie (see BF16_NEAR_TIES)",
                                                        strict=False)] if s.stem in BF16_NEAR_TIES else [])
    for s in SPECS
])
def test_spec_matches_transformers_bf16_three_way(reports, spec):
    report = reports(spec)
    bf16 = [c for c in report.checks if c.name == BF16]
    assert bf16 and all(c.passed for c in bf16), report.format()
