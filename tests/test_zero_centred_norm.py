"""Zero-centred RMSNorm (``x_hat * (1 + w)``, HF Qwen3NextRMSNorm / Gemma) against transformers, fp32 and bf16."""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.layers.norm import RMSNorm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_qwen3_next_rmsnorm(dtype):
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextRMSNorm

    torch.manual_seed(0)
    hf = Qwen3NextRMSNorm(64, eps=1e-6)
    ours = RMSNorm(64, eps=1e-6, zero_centred=True)
    assert torch.equal(ours.weight, hf.weight)  # both initialise the offset to zero
    with torch.no_grad():
        hf.weight.normal_(0, 0.5)
        ours.weight.copy_(hf.weight)
    hf, ours = hf.to(dtype), ours.to(dtype)
    x, r = torch.randn(5, 64, dtype=dtype), torch.randn(5, 64, dtype=dtype)
    assert torch.equal(ours(x), hf(x))  # same op order -> bit-identical
    normed, residual = ours(x, r)
    assert torch.equal(residual, x + r)
    assert torch.equal(normed, hf(x + r))
    # Applying the offset the Llama way (weight * x_hat rounded first) differs in bf16: the order is what matters.
    plain = RMSNorm(64, eps=1e-6).to(dtype)
    with torch.no_grad():
        plain.weight.copy_(1 + ours.weight.float())
    if dtype == torch.float32:
        torch.testing.assert_close(plain(x), hf(x))
