"""Neuron TP-sharded experts read only their slices: each closure loader narrows the lazy safetensors slices before
reading, for every checkpoint layout, and returns what reading whole experts and slicing them gave."""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime import distributed
from modelgen.runtime.layers.moe.ops import stacked_from_fused
from modelgen.runtime.targets.neuron.experts import expert_loaders

E, H, I = 4, 6, 8  # experts, hidden, intermediate (4 ranks share each expert: slices of 2)


class CountingSlice:
    """A safetensors-like lazy slice (get_shape + indexing only) counting the elements each read returns."""

    def __init__(self, t: torch.Tensor, counter: list[int]):
        self.t, self.counter = t, counter

    def get_shape(self):
        return list(self.t.shape)

    def __getitem__(self, index):
        out = self.t[index]
        self.counter[0] += out.numel()
        return out.clone()


@pytest.fixture
def tp_sharded_experts():
    """Experts TP-sharded over 4 ranks (expert_parallel_size=1), this process rank 2 of them."""
    distributed.set_parallel_config(distributed.ParallelConfig(1))
    distributed.set_groups(4, 2, None)
    yield 2, 4
    distributed.set_groups()
    distributed.set_parallel_config(distributed.ParallelConfig())


def _read(loader, tensors, counter):
    counter[0] = 0
    return loader.transform([CountingSlice(t, counter) for t in tensors], 2)


def _case(layout: str | None, part: str, fused: bool, g: torch.Generator):
    """(checkpoint tensors, the full stacked parameter they load into) for one part and layout."""
    if not fused:  # per-expert HF tensors: [gate_e, up_e] interleaved for w13, down_e for w2
        if part == "w13":
            tensors = [torch.randn(I, H, generator=g) for _ in range(2 * E)]
            full = torch.stack([torch.cat(tensors[2 * e:2 * e + 2]) for e in range(E)])
        else:
            tensors = [torch.randn(H, I, generator=g) for _ in range(E)]
            full = torch.stack(tensors)
        return tensors, full
    shapes = {("stacked", "w13"): (E, 2 * I, H), ("stacked", "w2"): (E, H, I), ("stacked", "w13_bias"): (E, 2 * I),
              ("interleaved_transposed", "w13"): (E, H, 2 * I), ("interleaved_transposed", "w2"): (E, I, H),
              ("interleaved_transposed", "w13_bias"): (E, 2 * I)}
    t = torch.randn(*shapes[(layout or "stacked", part)], generator=g)
    return [t], stacked_from_fused(t, part, layout or "stacked")


@pytest.mark.parametrize("layout,part,fused", [
    (None, "w13", False), (None, "w2", False), (None, "w13", True), (None, "w2", True),
    ("interleaved_transposed", "w13", True), ("interleaved_transposed", "w2", True),
    ("interleaved_transposed", "w13_bias", True), ("stacked", "w13_bias", True),
])
def test_tp_sharded_expert_loaders_read_only_their_slice(tp_sharded_experts, layout, part, fused):
    rank, size = tp_sharded_experts
    g = torch.Generator().manual_seed(0)
    tensors, full = _case(layout, part, fused, g)
    moe, loaders = expert_loaders(E, (part,), layout)
    assert (moe.tp_size, moe.tp_rank, moe.num_local_experts) == (4, 2, E)
    counter = [0]
    got = _read(loaders[part], tensors, counter)
    want = distributed.expert_slice(full, part, rank, size)  # what reading whole experts and slicing gave
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert counter[0] == want.numel() == sum(t.numel() for t in tensors) // size  # only the slice's elements


def test_down_bias_is_kept_by_rank_zero_only(tp_sharded_experts):
    counter = [0]
    bias = torch.randn(E, H)
    _, loaders = expert_loaders(E, ("w2_bias",), "interleaved_transposed")
    assert torch.equal(_read(loaders["w2_bias"], [bias], counter), torch.zeros(E, H))  # rank 2: zeros


def test_indivisible_intermediate_is_one_line(tp_sharded_experts):
    _, loaders = expert_loaders(E, ("w2",))
    with pytest.raises(ValueError, match=r"moe intermediate_size \(6\) is not divisible by the ranks sharing each "
                                         r"expert \(4\)"):
        _read(loaders["w2"], [torch.randn(E, H, 6)], [0])
