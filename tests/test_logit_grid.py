"""Multi-prompt logit grid against stored golden references (vLLM Neuron guide: "End-to-end logit tests ...
validate output logits against golden references across a grid of configurations").

Grid: fixture model (tiny seeded Llama ``gqa``, Qwen3-MoE ``qwen3_moe_norm``) x target (rocm, neuron) x dtype
(float32, bfloat16) x path:
  * ``prefill``: each sequence scored alone (teacher-forced prefill of prompt + continuation);
  * ``batched``: every prompt prefilled in ONE step, then the continuation fed one token per step to all
    sequences at once (paged decode, batch of 5, neuron decode buckets), logits taken at each step.
Each sequence is a prompt plus a fixed 4-token continuation (HF's greedy tokens, stored), so decode is
teacher-forced: the compared rows never depend on ours having chosen the same tokens.

Golden files (``tests/golden/<model>.json``) hold, per sequence, the top-5 token ids and fp32 logits (rounded to 5
decimals) of HF at the last prompt position and each continuation position, HF's bf16 error at those rows (the
precision floor for the bf16 runs), and a fingerprint of the fixture's weights.

Reproducibility: the fixtures are seeded CPU fp32 inits (``torch.manual_seed`` + transformers' ``_init_weights``),
deterministic for a given torch/transformers pair on any machine, and fp32 CPU GEMMs on different machines differ by
~1e-7 relative -- far below FP32_ATOL. If an upgrade changes the init, the fingerprint check says so (instead of a
wall of logit mismatches); check why, then regenerate: ``MODELGEN_REGEN_GOLDEN=1 pytest tests/test_logit_grid.py``
rewrites the files from HF (and still runs the comparisons).
"""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.work import Work
from modelgen.runtime.testing import assert_matches_golden_topk, golden_topk
from tests.llama_fixtures import make_llama
from tests.moe_fixtures import make_moe

GOLDEN_DIR = Path(__file__).parent / "golden"
REGEN = os.environ.get("MODELGEN_REGEN_GOLDEN") == "1"
K = 5
CONTINUATION = 4
# fp32: the fp32 parity tests hold every logit within 1e-4 of HF; golden values carry 5e-6 of rounding on top.
FP32_ATOL = 1e-4
# bf16: three-way bound on the golden entries: 2 x HF's own bf16 error at these rows (stored) + 1e-3 slack.
BF16_FACTOR, BF16_ATOL = 2.0, 1e-3

# A handful of prompts: short, long enough for a second neuron prefill bucket (>16 tokens), repeated pattern, and
# the vocabulary edges (0 and 159 of a 160-token vocabulary).
PROMPTS = [
    [1, 17, 42, 99, 3, 150, 64, 8, 23, 77, 5, 130],
    [1, 2],
    [1, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118],
    [1, 5, 1, 5, 1, 5, 1, 5, 1, 5, 1, 5, 1, 5],
    [1, 159, 0, 80],
]
MODELS = {
    "llama_gqa": lambda path: make_llama(path, "gqa", seed=0),
    "qwen3_moe_norm": lambda path: make_moe(path, "qwen3_moe_norm", seed=0),
}


def _fingerprint(model: torch.nn.Module) -> list[float]:
    """[sum, sum |w|, sum w^2] over every parameter, in float64, 10 significant digits: identical weights give
    identical numbers on any machine; a changed init changes them."""
    s = a = q = 0.0
    for p in model.parameters():
        d = p.detach().double()
        s, a, q = s + d.sum().item(), a + d.abs().sum().item(), q + d.square().sum().item()
    return [float(f"{v:.10g}") for v in (s, a, q)]


def _hf_golden(hf: torch.nn.Module) -> dict:
    hf16 = copy.deepcopy(hf).to(torch.bfloat16)
    seqs = []
    with torch.no_grad():
        for prompt in PROMPTS:
            out = hf.generate(torch.tensor([prompt]), max_new_tokens=CONTINUATION, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
            ids = out[0].tolist()
            rows = list(range(len(prompt) - 1, len(ids)))
            gold = hf(torch.tensor([ids])).logits[0, rows].float()
            floor = hf16(torch.tensor([ids])).logits[0, rows].float()
            seqs.append({
                "prompt": prompt,
                "continuation": ids[len(prompt):],
                "topk": golden_topk(gold, K),
                "bf16_floor": float(f"{(floor - gold).abs().max().item():.4g}"),
            })
    import transformers

    return {
        "produced_by": {"torch": torch.__version__, "transformers": transformers.__version__},
        "rows": "last prompt position, then each continuation position (the logits that predict the next token)",
        "k": K,
        "weights_fingerprint": _fingerprint(hf),
        "sequences": seqs,
    }


def _write(path: Path, golden: dict) -> None:
    """Small, diff-friendly JSON: one line per sequence field."""
    head = {k: v for k, v in golden.items() if k != "sequences"}
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()] + ['  "sequences": [']
    for i, seq in enumerate(golden["sequences"]):
        body = ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in seq.items())
        lines.append("   {\n" + body + "\n   }" + ("," if i < len(golden["sequences"]) - 1 else ""))
    lines += ["  ]", "}"]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """model -> (checkpoint dir, golden dict); checks the fixture still produces the golden's weights."""
    cache: dict = {}

    def get(model: str):
        if model not in cache:
            d = tmp_path_factory.mktemp(f"grid_{model}")
            hf = MODELS[model](d)
            path = GOLDEN_DIR / f"{model}.json"
            if REGEN:
                GOLDEN_DIR.mkdir(exist_ok=True)
                _write(path, _hf_golden(hf))
            if not path.exists():
                pytest.fail(f"{path}: no golden file; create it with MODELGEN_REGEN_GOLDEN=1")
            golden = json.loads(path.read_text())
            here = _fingerprint(hf)
            if here != golden["weights_fingerprint"]:
                import transformers

                pytest.fail(
                    f"{path.name}: fixture weights differ from those the golden file was made from (fingerprint "
                    f"{here} vs {golden['weights_fingerprint']}; made with {golden['produced_by']}, running torch "
                    f"{torch.__version__} / transformers {transformers.__version__}): the seeded init changed; "
                    f"check why, then regenerate with MODELGEN_REGEN_GOLDEN=1"
                )
            cache[model] = (d, golden)
        return cache[model]

    return get


def _tolerance(dtype: str, seq: dict) -> float:
    return FP32_ATOL if dtype == "float32" else BF16_FACTOR * seq["bf16_floor"] + BF16_ATOL


def _prefill_rows(llm: LLM, seq: dict) -> torch.Tensor:
    ids = seq["prompt"] + seq["continuation"]
    return llm.score(ids).float()[len(seq["prompt"]) - 1:]


def _batched_rows(llm: LLM, seqs: list[dict]) -> list[torch.Tensor]:
    """All prompts prefilled in one step, then one teacher-forced decode step per continuation token for all of
    them together; returns each sequence's rows in golden order."""
    ids = list(range(1000, 1000 + len(seqs)))  # sequence ids of our own, released below
    rows: list[list[torch.Tensor]] = [[] for _ in seqs]
    try:
        for sid, seq in zip(ids, seqs):
            llm.blocks.ensure(sid, len(seq["prompt"]) + CONTINUATION)
        logits = llm.runner.step([Work(sid, seq["prompt"], 0) for sid, seq in zip(ids, seqs)])
        for r, row in zip(rows, logits):
            r.append(row)
        for i in range(CONTINUATION):
            work = [Work(sid, [seq["continuation"][i]], len(seq["prompt"]) + i) for sid, seq in zip(ids, seqs)]
            for r, row in zip(rows, llm.runner.step(work)):
                r.append(row)
    finally:
        for sid in ids:
            llm.blocks.release(sid)
    return [torch.stack(r).float() for r in rows]


# bf16 for the dense model only. With the fixture's init (std 0.02) the MoE router logits are ~0.2 apart by ~0.002,
# i.e. two bf16 ulps: measured on prompt 1 of qwen3_moe_norm, layer 0 picks experts {2, 7} in fp32 and in HF bf16
# but {2, 5} in ours bf16 for the last token (router inputs differing by one bf16 ulp after attention), which moves
# that row's logits 0.016 while HF bf16's error is 0.0037. That is a legitimate, machine-dependent bf16 near-tie,
# not a bug, so a stored bf16 bound cannot hold for MoE here; bf16 MoE is gated at module level with decisive
# routing (test_module_three_way.py) and end to end against live HF (test_parity_moe.py).
GRID = [(m, t, d) for m in MODELS for t in ("rocm", "neuron") for d in ("float32", "bfloat16")
        if not (d == "bfloat16" and "moe" in m)]


@pytest.mark.parametrize("model, target, dtype", GRID, ids=["-".join(g) for g in GRID])
def test_logit_grid(grid, model, target, dtype):
    path, golden = grid(model)
    assert [s["prompt"] for s in golden["sequences"]] == PROMPTS, "golden prompts differ from PROMPTS: regenerate"
    llm = LLM(path, target=target, dtype=dtype, max_model_len=64, block_size=8)
    seqs = golden["sequences"]
    batched = _batched_rows(llm, seqs)
    for i, seq in enumerate(seqs):
        atol = _tolerance(dtype, seq)
        name = f"{model}/{target}/{dtype}/prompt {i}"
        assert_matches_golden_topk(_prefill_rows(llm, seq), seq["topk"], atol=atol, name=f"{name}/prefill")
        assert_matches_golden_topk(batched[i], seq["topk"], atol=atol, name=f"{name}/batched")


def test_golden_files_are_small_and_complete():
    for model in MODELS:
        path = GOLDEN_DIR / f"{model}.json"
        assert path.stat().st_size < 8192, f"{path.name} is {path.stat().st_size} bytes (keep golden files small)"
        golden = json.loads(path.read_text())
        for seq in golden["sequences"]:
            assert len(seq["continuation"]) == CONTINUATION
            assert len(seq["topk"]["ids"]) == CONTINUATION + 1 and all(len(r) == K for r in seq["topk"]["ids"])
            assert 0 < seq["bf16_floor"] < 1, f"{path.name}: implausible bf16 floor {seq['bf16_floor']}"


def test_golden_writer_round_trips(tmp_path):
    """What MODELGEN_REGEN_GOLDEN=1 writes reads back unchanged (the compact layout is still plain JSON)."""
    golden = json.loads((GOLDEN_DIR / "llama_gqa.json").read_text())
    _write(tmp_path / "g.json", golden)
    assert json.loads((tmp_path / "g.json").read_text()) == golden
    assert (tmp_path / "g.json").read_text() == (GOLDEN_DIR / "llama_gqa.json").read_text()
