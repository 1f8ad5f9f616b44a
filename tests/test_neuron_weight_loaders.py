"""vLLM Neuron-style closure loaders, tested on real safetensors slices without a model."""
from __future__ import annotations

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from modelgen.runtime.neuron.weight_loader import (
    expert_parallel_grouped_loader,
    expert_parallel_interleaved_loader,
    expert_parallel_tensor_dim_loader,
    expert_weight_loader,
    full_tensor_loader,
    fused_qkv_weight_loader,
    sharding_weight_loader,
    stacked_experts_loader,
    with_rank_override,
)

E, I, H = 4, 3, 5


@pytest.fixture()
def slices(tmp_path):
    torch.manual_seed(0)
    tensors = {
        "q": torch.randn(8, 6), "k": torch.randn(2, 6), "v": torch.randn(2, 6),
        "fused_w13": torch.randn(E, 2 * I, H),
        **{f"gate{e}": torch.randn(I, H) for e in range(E)},
        **{f"up{e}": torch.randn(I, H) for e in range(E)},
        **{f"down{e}": torch.randn(H, I) for e in range(E)},
    }
    save_file(tensors, tmp_path / "t.safetensors")
    f = safe_open(tmp_path / "t.safetensors", "pt")
    return tensors, (lambda *names: [f.get_slice(n) for n in names])


def test_sharding_and_rank_override(slices):
    t, get = slices
    loader = sharding_weight_loader(shard_dim=1, shard_size=4, num_shards=2, is_storage_transposed=True)
    assert torch.equal(loader.transform(get("q"), 1), t["q"][4:].t())
    assert torch.equal(with_rank_override(loader, 0).transform(get("q"), 1), t["q"][:4].t())


def test_fused_qkv_with_kv_replicas(slices):
    t, get = slices
    # 4 ranks, q 2 rows each; 2 kv rows total -> 1 kv head of size 1 per rank, replicated on 2 ranks
    loader = fused_qkv_weight_loader(q_size=2, kv_size=1, shard_dim=0, num_shards=4, num_kv_replicas=2)
    for rank in range(4):
        got = loader.transform(get("q", "k", "v"), rank)
        kv = rank // 2
        assert torch.equal(got, torch.cat([t["q"][2 * rank : 2 * rank + 2], t["k"][kv : kv + 1], t["v"][kv : kv + 1]]))


def test_expert_layouts_select_only_local_experts(slices):
    t, get = slices
    local = [2, 3]
    fused = expert_parallel_tensor_dim_loader(local, full_tensor_loader(), expert_dim=0).transform(get("fused_w13"), 1)
    assert torch.equal(fused, t["fused_w13"][2:4])
    interleaved = [n for e in range(E) for n in (f"gate{e}", f"up{e}")]
    w13 = expert_parallel_interleaved_loader(local, stacked_experts_loader(2, "interleaved"), E).transform(get(*interleaved), 1)
    assert torch.equal(w13, torch.stack([torch.cat([t[f"gate{e}"], t[f"up{e}"]]) for e in local]))
    grouped = [f"gate{e}" for e in range(E)] + [f"up{e}" for e in range(E)]
    w13g = expert_parallel_grouped_loader(local, stacked_experts_loader(2, "grouped"), E).transform(get(*grouped), 1)
    assert torch.equal(w13g, w13)
    w2 = expert_weight_loader(local, E, "w2").transform(get(*[f"down{e}" for e in range(E)]), 1)
    assert torch.equal(w2, torch.stack([t[f"down{e}"] for e in local]))


def test_non_contiguous_experts_rejected():
    with pytest.raises(ValueError, match="contiguous"):
        expert_parallel_grouped_loader([0, 2], full_tensor_loader(), 4)
