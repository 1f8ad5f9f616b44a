"""Three-way accuracy gate and golden top-k logit references.

Three-way comparison (vLLM Neuron onboarding guide, "Three-way comparison pattern"): a low-precision implementation
cannot be expected to match an fp32 reference bit for bit, and a fixed tolerance is either too loose for well
conditioned outputs or too tight for ill conditioned ones. So the tolerance is *measured*: the same reference run in
the same low precision (HF bf16, the "floor") shows how much error the dtype alone introduces, and ours must stay
within ``factor`` times that error (plus ``atol`` for floors that happen to be ~0)::

    max|ours - gold| <= factor * max|floor - gold| + atol

``gold`` = HF in fp32, ``floor`` = HF in the low precision, ``ours`` = modelgen in the low precision. All three are
compared in float32. Mean absolute errors and the argmax agreement along the last dimension (meaningful for logits
and router scores) are reported beside the gate so a bench can print them.

Golden top-k: ``golden_topk`` turns fp32 reference logits into a small JSON-able record (ids and rounded values of
the k largest logits per row) and ``assert_matches_golden_topk`` checks logits against it in a way that does not
depend on the order of near-tied entries (see its docstring).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

__all__ = [
    "ThreeWayReport",
    "assert_close_three_way",
    "assert_matches_golden_topk",
    "golden_topk",
    "three_way_report",
]


@dataclass(frozen=True)
class ThreeWayReport:
    """The numbers behind one three-way comparison (all errors are absolute, against ``gold``, in float32)."""

    name: str
    shape: tuple[int, ...]
    factor: float
    atol: float
    ours_max: float  # max |ours - gold| (inf when ours holds NaN/Inf where gold does not)
    floor_max: float  # max |floor - gold|: the precision floor
    ours_mean: float
    floor_mean: float
    argmax_ours: float  # fraction of rows (last dim) whose argmax equals gold's
    argmax_floor: float
    worst_index: tuple[int, ...]  # where |ours - gold| is largest
    worst_gold: float
    worst_floor: float
    worst_ours: float

    @property
    def bound(self) -> float:
        return self.factor * self.floor_max + self.atol

    @property
    def passed(self) -> bool:
        return self.ours_max <= self.bound

    def summary(self) -> str:
        """One line: verdict, the three errors, argmax agreement and the worst element."""
        idx = ", ".join(map(str, self.worst_index))
        verdict = "ok" if self.passed else "FAILED"
        return (
            f"{self.name}: {verdict}: max|ours-gold| {self.ours_max:.4g} vs bound {self.bound:.4g} "
            f"(= {self.factor:g} x max|floor-gold| {self.floor_max:.4g} + atol {self.atol:g}); "
            f"mean|ours-gold| {self.ours_mean:.3g}, mean|floor-gold| {self.floor_mean:.3g}; "
            f"argmax agreement ours {100 * self.argmax_ours:.1f}%, floor {100 * self.argmax_floor:.1f}%; "
            f"worst at [{idx}]: gold {self.worst_gold:.6g}, floor {self.worst_floor:.6g}, ours {self.worst_ours:.6g}"
        )

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(bound=self.bound, passed=self.passed)
        return d


def _as_float32(t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        t = torch.as_tensor(t)
    return t.detach().to("cpu", torch.float32)


def _abs_err(x: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """|x - gold| with equal entries (including matching infinities, e.g. masked logits) counted as 0 and any other
    non-finite difference (NaN, an Inf gold does not have) counted as +inf so it can never pass."""
    err = (x - gold).abs()
    err = torch.where(x == gold, torch.zeros_like(err), err)
    return torch.where(torch.isfinite(err), err, torch.full_like(err, float("inf")))


def _argmax_agreement(x: torch.Tensor, gold: torch.Tensor) -> float:
    if x.dim() == 0 or x.numel() == 0:
        return 1.0
    return (x.argmax(-1) == gold.argmax(-1)).float().mean().item()


def three_way_report(
    gold, floor, ours, *, factor: float = 2.0, atol: float = 1e-2, name: str = "output",
) -> ThreeWayReport:
    """Measure ``ours`` and ``floor`` against ``gold`` (see the module docstring); does not assert.

    No separate argmax gate: with ``max|ours - gold| <= e`` an argmax can only move in rows whose top-2 gap is at
    most ``2e``, so a "decisive rows keep their argmax" check with a margin above 2e is implied by the max gate.
    The agreement rates are reported for the reader.
    """
    if factor < 1.0:
        raise ValueError(f"{name}: factor {factor} < 1 would demand ours be more accurate than the reference itself")
    g = _as_float32(gold)
    f = _as_float32(floor)
    o = _as_float32(ours)
    if not (g.shape == f.shape == o.shape):
        raise ValueError(
            f"{name}: shapes differ: gold {tuple(g.shape)}, floor {tuple(f.shape)}, ours {tuple(o.shape)}"
        )
    if g.numel() == 0:
        raise ValueError(f"{name}: empty tensors, nothing to compare")
    if torch.isnan(g).any():
        raise ValueError(f"{name}: gold holds NaN at {tuple(torch.nonzero(torch.isnan(g))[0].tolist())}; "
                         f"the fp32 reference must be finite")
    e_ours, e_floor = _abs_err(o, g), _abs_err(f, g)
    flat = int(torch.argmax(e_ours).item())
    worst = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), g.shape)) if g.dim() else ()
    ours_max, floor_max = e_ours.max().item(), e_floor.max().item()
    return ThreeWayReport(
        name=name,
        shape=tuple(g.shape),
        factor=float(factor),
        atol=float(atol),
        ours_max=ours_max,
        floor_max=floor_max,
        ours_mean=e_ours.mean().item(),  # inf if any element is non-finite: visible, never a silent pass
        floor_mean=e_floor.mean().item(),
        argmax_ours=_argmax_agreement(o, g),
        argmax_floor=_argmax_agreement(f, g),
        worst_index=worst,
        worst_gold=g[worst].item(),
        worst_floor=f[worst].item(),
        worst_ours=o[worst].item(),
    )


def assert_close_three_way(
    gold, floor, ours, *, factor: float = 2.0, atol: float = 1e-2, name: str = "output",
) -> ThreeWayReport:
    """Raise ``AssertionError`` (one line: the three errors, the worst index and its three values) unless
    ``max|ours - gold| <= factor * max|floor - gold| + atol``; returns the report otherwise."""
    report = three_way_report(gold, floor, ours, factor=factor, atol=atol, name=name)
    if not report.passed:
        raise AssertionError(report.summary())
    return report


# ---------------------------------------------------------------------------------------------------- golden top-k
def golden_topk(logits: torch.Tensor, k: int = 5, decimals: int = 5) -> dict:
    """``logits [rows, V]`` (fp32 reference) -> ``{"ids": [[k ints]...], "values": [[k floats]...]}``, values
    rounded to ``decimals`` (fp32 logits of the fixtures are O(1), so 5 decimals keep them well below any tolerance
    a test would use while keeping the JSON small)."""
    x = logits.detach().to("cpu", torch.float32)
    if x.dim() != 2:
        raise ValueError(f"golden_topk: expected logits [rows, vocab], got shape {tuple(x.shape)}")
    top = x.topk(k, dim=-1)
    return {
        "ids": top.indices.tolist(),
        "values": [[round(v, decimals) for v in row] for row in top.values.tolist()],
    }


def assert_matches_golden_topk(logits: torch.Tensor, golden: dict, *, atol: float, name: str = "logits") -> None:
    """Check ``logits [rows, V]`` against a :func:`golden_topk` record, row by row:

    * ours at the golden ids equals the golden values within ``atol`` (the right tokens have the right scores), and
    * ours' k largest values equal the golden values within ``atol`` (no other token rose into the top k).

    Together these pin the top-k set without requiring the same order among entries closer than ``atol`` (two
    machines' fp32 GEMMs may order a near-tie differently). Raises one line naming the row, the check and the token.
    """
    x = logits.detach().to("cpu", torch.float32)
    ids = torch.tensor(golden["ids"], dtype=torch.int64)
    want = torch.tensor(golden["values"], dtype=torch.float32)
    if x.dim() != 2 or x.shape[0] != ids.shape[0]:
        raise AssertionError(f"{name}: logits shape {tuple(x.shape)} does not match {ids.shape[0]} golden rows")
    at_ids = x.gather(1, ids)
    err = (at_ids - want).abs()
    if not bool((err <= atol).all()):
        r, j = (int(i) for i in torch.nonzero(~(err <= atol))[0])
        raise AssertionError(
            f"{name}: row {r}: logit of golden top-{j + 1} token {ids[r, j].item()} is {at_ids[r, j].item():.6g}, "
            f"golden {want[r, j].item():.6g} (|diff| {err[r, j].item():.3g} > atol {atol:g})"
        )
    got_top = x.topk(ids.shape[1], dim=-1)
    err = (got_top.values - want).abs()
    if not bool((err <= atol).all()):
        r, j = (int(i) for i in torch.nonzero(~(err <= atol))[0])
        raise AssertionError(
            f"{name}: row {r}: top-{j + 1} value {got_top.values[r, j].item():.6g} (token "
            f"{got_top.indices[r, j].item()}) vs golden {want[r, j].item():.6g} (token {ids[r, j].item()}): "
            f"a token outside the golden top-{ids.shape[1]} entered it"
        )
