"""Residual add + RMSNorm fused into the one-token GEMV (``runtime/ops/gpu/norm_linear.py``) against the two
launches it replaces (``norm.add_rms_norm`` then the projection): the new residual is bitwise the norm kernel's, the
normalised row too in the interpreter (within an ulp compiled), the product within 16-bit rounding of a float64
product of that row. GPU, or Triton's
interpreter (each autotuner config run once instead of timed)."""
from __future__ import annotations

import pytest
import torch

from tests.gpu_helpers import DEV, INTERPRET, KERNEL_MARKS, LOW, rel

pytestmark = KERNEL_MARKS


@pytest.fixture(autouse=True)
def _untimed(monkeypatch):
    if INTERPRET and not torch.cuda.is_available():
        from modelgen.runtime.ops.gpu import norm_linear as nl

        monkeypatch.setattr(nl._norm_gemv_kernel, "_do_bench", lambda call, quantiles: (call(), [1.0, 1.0, 1.0])[1])
        monkeypatch.setattr(nl._norm_gemv_kernel, "cache", {})
        kern = nl._norm_gemv_kernel  # split-K 1, 4 and 8 are enough for the logic (each config runs in numpy)
        monkeypatch.setattr(kern, "configs", [c for c in kern.configs if c.kwargs["BLOCK_N"] == 16
                                              and c.kwargs["BLOCK_K"] == 256])


@pytest.mark.parametrize("add", [True, False])
@pytest.mark.parametrize("zero_centred", [False, True])
@pytest.mark.parametrize("N,K", [(128, 1024), (640, 2048)])
def test_fused_norm_gemv_equals_norm_then_linear(add, zero_centred, N, K):
    from modelgen.runtime.ops.gpu import norm as gn, norm_linear as nl

    g = torch.Generator(device=DEV).manual_seed(N + K + add)
    x = torch.randn(1, K, device=DEV, generator=g).to(LOW)
    r = torch.randn(1, K, device=DEV, generator=g).to(LOW) if add else None
    nw = (1 + 0.1 * torch.randn(K, device=DEV, generator=g)).to(LOW)
    W = (0.05 * torch.randn(N, K, device=DEV, generator=g)).to(LOW)
    assert nl.supported(x, nw, W)
    for _ in range(2):  # the second call reuses the arrival counters the first one reset
        y, h, res = nl.add_rms_norm_linear(x, r, nw, 1e-6, W, zero_centred=zero_centred)
    h0, r0 = gn.add_rms_norm(x, r, nw, 1e-6, zero_centred)
    assert torch.equal(res, r0)  # an elementwise sum: exact
    # The mean of squares is one reduction over the row in both kernels; compiled, its order follows each kernel's
    # layout, so the normalised row may differ by one 16-bit ulp in rare elements (bitwise in the interpreter).
    assert torch.equal(h, h0) if INTERPRET and not torch.cuda.is_available() else rel(h, h0) < 4e-3
    assert rel(y, h0.double() @ W.double().T) < 1e-2
    buf = torch.full_like(x, float("nan"))
    y2, none, res2 = nl.add_rms_norm_linear(x, r, nw, 1e-6, W, zero_centred=zero_centred, want_normed=False,
                                           residual_out=buf)
    assert none is None and torch.equal(y2, y) and torch.equal(res2, r0)
    assert not add or res2 is buf  # the caller's buffer holds the new residual


def test_other_shapes_take_the_two_launches():
    from modelgen.runtime.ops.gpu import norm as gn, norm_linear as nl

    x, r = torch.randn(3, 512, device=DEV).to(LOW), torch.randn(3, 512, device=DEV).to(LOW)
    nw, W = torch.ones(512, device=DEV).to(LOW), torch.randn(64, 512, device=DEV).to(LOW) * 0.05
    assert not nl.supported(x, nw, W)
    y, h, res = nl.add_rms_norm_linear(x, r, nw, 1e-6, W)
    h0, r0 = gn.add_rms_norm(x, r, nw, 1e-6)
    assert torch.equal(h, h0) and torch.equal(res, r0) and rel(y, h0.double() @ W.double().T) < 1e-2
