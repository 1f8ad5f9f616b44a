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


@pytest.mark.parametrize("add", [True, False])
def test_layers_paired_by_fuse_norm_linear(add):
    """The generated layers' pairing (runtime/layers/norm.py ``fuse_norm_linear``): at one token the norm computes the
    projection's product and the projection, called with exactly the norm's output, hands it over once; a router
    routes from those logits as from its own; other tensors, more tokens and projections with a bias are untouched."""
    from modelgen.runtime.layers.linear import ReplicatedLinear
    from modelgen.runtime.layers.moe import TopKRouter
    from modelgen.runtime.layers.norm import RMSNorm, fuse_norm_linear
    from modelgen.runtime.ops.gpu import norm as gn

    K, N, E = 1024, 128, 16
    g = torch.Generator(device=DEV).manual_seed(7 + add)
    x = torch.randn(1, K, device=DEV, generator=g).to(LOW)
    r = torch.randn(1, K, device=DEV, generator=g).to(LOW) if add else None
    norm = RMSNorm(K, 1e-6).to(DEV, LOW)
    norm.weight.data = (1 + 0.1 * torch.randn(K, device=DEV, generator=g)).to(LOW)
    proj = ReplicatedLinear(K, N, bias=False).to(DEV, LOW)
    proj.weight.data = (0.05 * torch.randn(N, K, device=DEV, generator=g)).to(LOW)
    assert fuse_norm_linear(norm, proj)
    out = norm(x, r)
    h, res = out if add else (out, x)
    h0, r0 = gn.add_rms_norm(x, r, norm.weight, 1e-6) if add else (gn.rms_norm(x, norm.weight, 1e-6), x)
    assert torch.equal(res, r0) and rel(h, h0) < 4e-3
    assert proj._prenormed is not None and proj._prenormed[0] is h
    y = proj(h)
    assert proj._prenormed is None  # handed over once
    assert rel(y, h0.double() @ proj.weight.double().T) < 1e-2
    own = proj(h.clone())  # not the norm's tensor: the projection multiplies itself
    assert rel(own, y) < 1e-2 and proj._prenormed is None
    two = torch.randn(2, K, device=DEV, generator=g).to(LOW)
    norm(two, torch.randn_like(two) if add else None)
    assert proj._prenormed is None  # two tokens: the two launches
    biased = ReplicatedLinear(K, N, bias=True)
    assert not fuse_norm_linear(RMSNorm(K, 1e-6), biased)

    router = TopKRouter(K, E, top_k=4, scoring="softmax", renormalize=True, weights_in_model_dtype=True).to(DEV, LOW)
    router.weight.data = (0.05 * torch.randn(E, K, device=DEV, generator=g)).to(LOW)
    alone = TopKRouter(K, E, top_k=4, scoring="softmax", renormalize=True, weights_in_model_dtype=True).to(DEV, LOW)
    alone.weight.data = router.weight.data.clone()
    assert fuse_norm_linear(norm, router)
    out = norm(x, r)
    h = out[0] if add else out
    w, ids = router(h)
    w0, ids0 = alone(h)
    assert router._prenormed is None and torch.equal(ids, ids0) and rel(w, w0) < 1e-2
