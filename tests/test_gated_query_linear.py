"""QKVParallelLinear(gated_query=True): Qwen3-Next's q_proj holds [query_h | gate_h] per head; each TP rank gets whole
heads of both, and k/v as usual. Ranks are simulated by patching the distributed helpers (no process group needed)."""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime import distributed as dist
from modelgen.runtime.layers.linear import QKVParallelLinear

H, D, NH, NKV = 16, 4, 4, 2


def _full_weights():
    torch.manual_seed(0)
    return torch.randn(NH * 2 * D, H), torch.randn(NKV * D, H), torch.randn(NKV * D, H)


@pytest.mark.parametrize("world", [1, 2])
def test_ranks_hold_whole_query_gate_heads(monkeypatch, world):
    q, k, v = _full_weights()
    x = torch.randn(3, H)
    # HF: q_proj(x).view(T, NH, 2D).chunk(2) -> query [T, NH, D], gate [T, NH*D]
    want_q, want_gate = (x @ q.T).view(3, NH, 2 * D).chunk(2, dim=-1)
    for rank in range(world):
        monkeypatch.setattr(dist, "tp_size", lambda: world)
        monkeypatch.setattr(dist, "tp_rank", lambda: rank)
        layer = QKVParallelLinear(H, D, NH, NKV, bias=False, gated_query=True)
        for shard, w in zip("qkv", (q, k, v)):
            layer.weight_loader(layer.weight, w, shard)
        out = x @ layer.weight.T
        heads = NH // world
        q_local, k_local, v_local = out.split([heads * 2 * D, NKV // world * D, NKV // world * D], dim=-1)
        got_q, got_gate = q_local.view(3, heads, 2 * D).chunk(2, dim=-1)
        sl = slice(rank * heads, (rank + 1) * heads)
        torch.testing.assert_close(got_q, want_q[:, sl])
        torch.testing.assert_close(got_gate, want_gate[:, sl])
        kv = slice(rank * NKV // world * D, (rank + 1) * NKV // world * D)
        torch.testing.assert_close(k_local, (x @ k.T)[:, kv])
        torch.testing.assert_close(v_local, (x @ v.T)[:, kv])


def test_wrong_query_size_is_named():
    layer = QKVParallelLinear(H, D, NH, NKV, bias=False, gated_query=True)
    with pytest.raises(ValueError, match=r"q_proj: checkpoint tensor has shape \(16, 16\), expected \(32, 16\)"):
        layer.weight_loader(layer.weight, torch.zeros(NH * D, H), "q")  # an ungated q_proj
