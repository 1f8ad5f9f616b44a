"""Load-time fused GDN projections (``layer.FUSED_PROJECTIONS``): rows permuted to blocks, ``in_proj_qkvz`` and
``in_proj_ba`` views of one buffer run as one linear, split by views. A row permutation / concatenation gives every
output element the same dot product, so the layer's outputs and the states it advances must be *bitwise* those of the
separate-GEMM, ``torch.cat`` path -- for both checkpoint layouts, fp32 and bf16, and each tensor-parallel rank."""
from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_file

from modelgen.runtime.layers.gated_deltanet import layer as gdl
from modelgen.runtime.layers.gated_deltanet import GatedDeltaNet
from modelgen.runtime.state_cache import PAD_SLOT, StateMetadata, StatePool
from tests.test_gated_deltanet_layer import (DK, DV, EPS, HIDDEN, HK, HV, KERNEL, LAYOUTS, load_into, make_hf,
                                             make_ours, step)


def _build(layout, hf, fused: bool, monkeypatch, dtype):
    monkeypatch.setattr(gdl, "FUSED_PROJECTIONS", fused)
    layer, pool = make_ours(layout, hf, dtype=dtype)
    layer.process_weights_after_loading()  # the loaders' post-load hook (runtime/loader/quantization.py)
    return layer, pool


def _run(layer, pool, dtype, seed=3):
    """Prefill (two sequences, one crossing a chunk), a mixed step, a decode_only step with a padding row and
    padding tokens, then a two-token verify window (tokens_per_seq); returns every output and the final states."""
    gen = torch.Generator().manual_seed(seed)
    r = lambda n: torch.randn(n, HIDDEN, generator=gen).to(dtype)  # noqa: E731
    outs = step(layer, pool, [(0, r(70), True), (1, r(5), True)])
    outs += step(layer, pool, [(1, r(1), False), (0, r(3), False)])
    with torch.no_grad():
        meta = StateMetadata.build([1, 1, 1], [pool.slot(0), PAD_SLOT, pool.slot(1)], [False] * 3)
        assert meta.decode_only
        outs.append(layer(r(5), meta))
        win = StateMetadata(torch.tensor([0, 2, 4], dtype=torch.int32), torch.tensor([pool.slot(0), pool.slot(1)]),
                            torch.tensor([False, False]), tokens_per_seq=2, seq_lens=torch.tensor([2, 1]))
        outs.append(layer(r(4), win))
    name = layer.layer_name
    return outs, pool.conv[name].clone(), pool.recurrent[name].clone()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_fused_projections_bitwise_equal_separate(layout, dtype, monkeypatch):
    hf = make_hf(layout)
    old, old_pool = _build(layout, hf, False, monkeypatch, dtype)
    new, new_pool = _build(layout, hf, True, monkeypatch, dtype)
    assert old.in_proj is None and old.rows_layout == layout
    # one buffer, the two weights its views: no extra memory
    w = new.in_proj
    assert new.rows_layout == "qwen3_5" and w.shape == (old.in_proj_qkvz.weight.shape[0] +
                                                       old.in_proj_ba.weight.shape[0], HIDDEN)
    assert new.in_proj_qkvz.weight.data_ptr() == w.data_ptr()
    assert new.in_proj_ba.weight.data_ptr() == w[old.in_proj_qkvz.weight.shape[0]:].data_ptr()
    if layout == "qwen3_next":  # the rows did move (else the test below could not tell the two paths apart)
        assert not torch.equal(new.in_proj_qkvz.weight, old.in_proj_qkvz.weight)
        assert not torch.equal(new.in_proj_ba.weight, old.in_proj_ba.weight)
    a, b = _run(old, old_pool, dtype), _run(new, new_pool, dtype)
    for x, y in zip(a[0], b[0]):
        assert torch.equal(x, y), f"outputs differ: max {(x.float() - y.float()).abs().max()}"
    assert torch.equal(a[1], b[1]) and torch.equal(a[2], b[2]), "states advanced differently"
    assert not torch.equal(a[2], torch.zeros_like(a[2]))


def test_moved_module_falls_back_to_two_gemms(monkeypatch):
    """A module moved after loading (views no longer in the buffer) must not run the stale buffer."""
    hf = make_hf("qwen3_next")
    old, old_pool = _build("qwen3_next", hf, False, monkeypatch, torch.float32)
    new, new_pool = _build("qwen3_next", hf, True, monkeypatch, torch.float32)
    for lin in (new.in_proj_qkvz, new.in_proj_ba):  # what a .to() does: each parameter its own copy
        lin.weight.data = lin.weight.data.clone()
    new.in_proj.zero_()
    a, b = _run(old, old_pool, torch.float32), _run(new, new_pool, torch.float32)
    assert all(torch.equal(x, y) for x, y in zip(a[0], b[0]))


def _tp_rank(rank: int, world: int, init_file: str, weights: str, layout: str, out: str) -> None:
    import torch.distributed as tdist

    torch.set_num_threads(1)
    tdist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        res = {}
        for fused in (False, True):
            gdl.FUSED_PROJECTIONS = fused
            layer = GatedDeltaNet(HIDDEN, HK, HV, DK, DV, KERNEL, EPS, layout=layout, layer_name="l0")
            load_into(layer, load_file(weights))
            layer.process_weights_after_loading()
            assert (layer.in_proj is not None) == fused and layer.num_k_heads == HK // world
            pool = StatePool([layer.state_spec()], 2)
            layer.bind_state(*pool.tensors()["l0"])
            outs, conv, rec = _run(layer, pool, torch.float32)
            res.update({f"{fused}.out": torch.cat(outs).contiguous(), f"{fused}.conv": conv, f"{fused}.rec": rec})
        save_file(res, f"{out}.rank{rank}.safetensors")
    finally:
        tdist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_fused_projections_tensor_parallel_2(tmp_path, layout):
    """Each rank permutes its own key-head groups: fused equals separate bitwise on every rank of TP=2."""
    hf = make_hf(layout)
    weights = str(tmp_path / "w.safetensors")
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, weights)
    out = str(tmp_path / "out")
    mp.spawn(_tp_rank, args=(2, str(tmp_path / "init"), weights, layout, out), nprocs=2)
    for rank in range(2):
        got = load_file(f"{out}.rank{rank}.safetensors")
        for part in ("out", "conv", "rec"):
            assert torch.equal(got[f"True.{part}"], got[f"False.{part}"]), f"rank {rank} {part}"
