"""RoPE module: a float32 cos/sin table buffer built from the HF rope parameters, applied to q and k."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..ops import gpu
from ..ops.rope import apply_rope, cos_sin_cache


class RotaryEmbedding(nn.Module):
    def __init__(
        self, head_dim: int, rotary_dim: int, max_position: int, base: float, scaling: dict[str, Any] | None, style: str
    ):
        super().__init__()
        self.head_dim, self.rotary_dim, self.style = head_dim, rotary_dim, style
        # Table covers the scaled context when rope scaling extends it (factor x original).
        factor = float((scaling or {}).get("factor") or 1.0)
        cache_len = int(max_position * max(factor, 1.0)) if (scaling or {}).get("rope_type") == "dynamic" else max_position
        if torch.get_default_device().type == "meta":
            # A shape-only build (the loader's header coverage check): computing the table under the meta device's
            # function mode costs seconds (its first use imports torch._dynamo) and yields no values anyway.
            table = torch.empty(cache_len, rotary_dim, dtype=torch.float32)
        else:
            table = cos_sin_cache(rotary_dim, base, scaling, max_position, cache_len)
        self.register_buffer("cos_sin_cache", table, persistent=False)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``q [tokens, heads, head_dim]``, ``k [tokens, kv_heads, head_dim]``."""
        if gpu.enabled(q) and q.stride(-1) == 1 and k.stride(-1) == 1:
            from ..ops.gpu.rope import rope_qk

            return rope_qk(q, k, self.cos_sin_cache, positions, self.rotary_dim, self.style)
        q = apply_rope(q, self.cos_sin_cache, positions, self.rotary_dim, self.style)
        k = apply_rope(k, self.cos_sin_cache, positions, self.rotary_dim, self.style)
        return q, k


_ROPE_CACHE: dict[tuple, RotaryEmbedding] = {}


def get_rope(
    head_dim: int, rotary_dim: int, max_position: int, base: float, scaling: dict[str, Any] | None, style: str
) -> RotaryEmbedding:
    """One shared module per distinct parameter set, so N layers hold one cos/sin table (as ATOM's ``get_rope``)."""
    device = torch.get_default_device()
    key = (head_dim, rotary_dim, max_position, float(base), repr(sorted((scaling or {}).items())), style, str(device))
    if key not in _ROPE_CACHE:
        _ROPE_CACHE[key] = RotaryEmbedding(head_dim, rotary_dim, max_position, base, scaling, style)
    return _ROPE_CACHE[key]
