"""GatedDeltaNet layer (rocm target) against transformers' Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet.

Random weights are copied into the HF module and loaded into ours through the weight_loaders (the same name routing
as the checkpoint loader: ``resolve_packed`` with the Qwen3.5 packed mapping). HF runs each sequence whole with no
cache (chunked rule over every token), our layer runs it through state slots: one shot, chunked prefill, decode steps,
mixed batches, padding, and tensor parallel over two gloo processes.
"""
from __future__ import annotations

import re

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_file

from modelgen.runtime.layers.gated_deltanet import QWEN3_5_PACKED_MODULES, GatedDeltaNet
from modelgen.runtime.state_cache import StateMetadata
from modelgen.runtime.loader.names import resolve_packed
from modelgen.runtime.state_cache import PAD_SLOT, StatePool

transformers = pytest.importorskip("transformers")
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf35  # noqa: E402
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as hf35moe  # noqa: E402
from transformers.models.qwen3_next import modeling_qwen3_next as hfnext  # noqa: E402

HIDDEN, HK, HV, DK, DV, KERNEL, EPS = 64, 2, 4, 16, 16, 4, 1e-6
ATOL = RTOL = 2e-5  # fp32; observed max abs diff is reported by the tests' failure messages
LAYOUTS = ["qwen3_next", "qwen3_5"]


def _config(layout: str):
    kw = dict(hidden_size=HIDDEN, linear_num_key_heads=HK, linear_num_value_heads=HV, linear_key_head_dim=DK,
              linear_value_head_dim=DV, linear_conv_kernel_dim=KERNEL, rms_norm_eps=EPS, num_hidden_layers=1,
              layer_types=["linear_attention"], hidden_act="silu")
    if layout == "qwen3_next":
        return transformers.Qwen3NextConfig(**kw)
    if layout == "qwen3_5_moe":
        return transformers.Qwen3_5MoeTextConfig(**kw)
    return transformers.Qwen3_5TextConfig(**kw)


def make_hf(layout: str, seed: int = 0, dtype=torch.float32) -> torch.nn.Module:
    cls = {"qwen3_next": hfnext.Qwen3NextGatedDeltaNet, "qwen3_5": hf35.Qwen3_5GatedDeltaNet,
           "qwen3_5_moe": hf35moe.Qwen3_5MoeGatedDeltaNet}[layout]
    torch.manual_seed(seed)
    hf = cls(_config(layout), 0)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name == "A_log":
                p.copy_(torch.empty_like(p).uniform_(0.01, 16, generator=gen).log())
            elif name == "norm.weight":
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * (0.5 if p.dim() == 1 else p.shape[-1] ** -0.5))
    return hf.to(dtype).eval()


def load_into(layer: GatedDeltaNet, state_dict: dict[str, torch.Tensor]) -> None:
    """Route HF tensors to our parameters exactly as the packed checkpoint loader does; every slot filled once."""
    params = dict(layer.named_parameters())
    packed = QWEN3_5_PACKED_MODULES if layer.layout == "qwen3_5" else {}
    filled = []
    for key, tensor in state_dict.items():
        name, shard = resolve_packed(key, packed)
        param = params[name]
        loader = getattr(param, "weight_loader", None)
        if loader is None:  # replicated (norm.weight): the loader copies as is
            assert param.shape == tensor.shape
            param.data.copy_(tensor)
        else:
            loader(param, tensor, shard) if shard is not None else loader(param, tensor)
        filled.append((name, shard))
    expected = {(n, None) for n in params if n not in ("in_proj_qkvz.weight", "in_proj_ba.weight")}
    expected |= {(v[0] + ".weight", v[1]) for v in packed.values()} if packed else \
        {("in_proj_qkvz.weight", None), ("in_proj_ba.weight", None)}
    assert sorted(filled, key=str) == sorted(expected, key=str)


def make_ours(layout: str, hf: torch.nn.Module, num_slots: int = 4, dtype=torch.float32):
    layout = "qwen3_5" if layout == "qwen3_5_moe" else layout  # Qwen3.5-MoE's GDN is Qwen3.5's (same tensors)
    layer = GatedDeltaNet(HIDDEN, HK, HV, DK, DV, KERNEL, EPS, layout=layout, layer_name="layers.0.linear_attn")
    layer.to(dtype)
    load_into(layer, {k: v for k, v in hf.state_dict().items()})
    pool = StatePool([layer.state_spec()], num_slots)
    layer.bind_state(*pool.tensors()[layer.layer_name])
    return layer, pool


def hf_full(hf: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return hf(x.unsqueeze(0))[0]


def step(layer, pool, segments, pad_tokens: int = 0) -> list[torch.Tensor]:
    """One flattened call. ``segments``: (seq_id or None for a padding sequence, tokens [n, H], fresh)."""
    xs, lens, slots, fresh = [], [], [], []
    for seq_id, x, is_fresh in segments:
        xs.append(x)
        lens.append(x.shape[0])
        slots.append(PAD_SLOT if seq_id is None else pool.allocate(seq_id))
        fresh.append(is_fresh)
    xs.append(torch.randn(pad_tokens, HIDDEN).to(xs[0].dtype))
    meta = StateMetadata.build(lens, slots, fresh)
    with torch.no_grad():
        out = layer(torch.cat(xs), meta)
    assert out.shape == (sum(lens) + pad_tokens, HIDDEN)
    return list(out[:sum(lens)].split(lens))


def close(got, want, what=""):
    diff = (got - want).abs().max().item()
    assert torch.allclose(got, want, atol=ATOL, rtol=RTOL), f"{what}: max abs diff {diff:.3g}"
    return diff


@pytest.mark.parametrize("layout", [*LAYOUTS, "qwen3_5_moe"])
def test_one_shot_prefill_crosses_chunks(layout):
    hf = make_hf(layout)
    layer, pool = make_ours(layout, hf)
    x = torch.randn(130, HIDDEN, generator=torch.Generator().manual_seed(1))
    (out,) = step(layer, pool, [(0, x, True)])
    close(out, hf_full(hf, x), "prefill 130")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_prefill_then_decode_matches_teacher_forced(layout):
    hf = make_hf(layout)
    layer, pool = make_ours(layout, hf)
    x = torch.randn(75, HIDDEN, generator=torch.Generator().manual_seed(2))
    want = hf_full(hf, x)
    (out,) = step(layer, pool, [(7, x[:70], True)])
    outs = [out]
    for t in range(70, 75):
        outs += step(layer, pool, [(7, x[t:t + 1], False)])
    close(torch.cat(outs), want, "prefill 70 + 5 decode")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_chunked_prefill_equals_one_shot(layout):
    hf = make_hf(layout)
    layer, pool = make_ours(layout, hf)
    x = torch.randn(70, HIDDEN, generator=torch.Generator().manual_seed(3))
    (whole,) = step(layer, pool, [(0, x, True)])
    parts = step(layer, pool, [(1, x[:40], True)]) + step(layer, pool, [(1, x[40:], False)])
    close(torch.cat(parts), whole, "40 + 30 vs 70")
    for name in ("conv", "recurrent"):
        t = getattr(pool, name)[layer.layer_name]
        torch.testing.assert_close(t[pool.slot(1)], t[pool.slot(0)], atol=ATOL, rtol=RTOL)
    close(whole, hf_full(hf, x), "one shot vs HF")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_mixed_batch_equals_each_alone_and_isolates_slots(layout):
    """One decoding, one continuing a chunked prefill, one fresh prefill, a padding sequence and padding tokens in one
    call; a slot outside the batch is untouched."""
    hf = make_hf(layout)
    layer, pool = make_ours(layout, hf, num_slots=5)
    gen = torch.Generator().manual_seed(4)
    a, b, c = torch.randn(71, HIDDEN, generator=gen), torch.randn(70, HIDDEN, generator=gen), \
        torch.randn(30, HIDDEN, generator=gen)
    bystander = torch.randn(9, HIDDEN, generator=gen)
    # earlier steps: a prefilled 70 tokens, b its first 40, the bystander 9 tokens
    step(layer, pool, [(0, a[:70], True), (1, b[:40], True), (3, bystander, True)])
    slot3 = pool.slot(3)
    before = [t[slot3].clone() for t in (pool.conv[layer.layer_name], pool.recurrent[layer.layer_name])]
    # the slot a new sequence gets may hold garbage from a finished one: fresh must not read it
    pool.conv[layer.layer_name][3] = float("nan")
    pool.recurrent[layer.layer_name][3] = 1e3
    outs = step(layer, pool, [(1, b[40:], False), (None, torch.randn(3, HIDDEN), True), (0, a[70:], False),
                              (2, c, True)], pad_tokens=5)
    assert pool.slot(2) == 3
    close(outs[0], hf_full(hf, b)[40:], "chunk continuing in a batch")
    close(outs[2], hf_full(hf, a)[70:], "decode in a batch")
    close(outs[3], hf_full(hf, c), "fresh prefill in a batch")
    assert torch.equal(outs[1], torch.zeros_like(outs[1]))  # padding sequence: zero output
    after = [t[slot3] for t in (pool.conv[layer.layer_name], pool.recurrent[layer.layer_name])]
    for x, y in zip(before, after):
        assert torch.equal(x, y)
    assert torch.isfinite(pool.conv[layer.layer_name]).all() and torch.isfinite(pool.recurrent[layer.layer_name]).all()


def test_padding_only_batch_touches_no_state():
    hf = make_hf("qwen3_next")
    layer, pool = make_ours("qwen3_next", hf)
    pool.recurrent[layer.layer_name].normal_()
    pool.conv[layer.layer_name].normal_()
    before = [t.clone() for t in (pool.conv[layer.layer_name], pool.recurrent[layer.layer_name])]
    step(layer, pool, [(None, torch.randn(4, HIDDEN), False), (None, torch.randn(1, HIDDEN), False)], pad_tokens=3)
    assert torch.equal(before[0], pool.conv[layer.layer_name])
    assert torch.equal(before[1], pool.recurrent[layer.layer_name])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bf16_matches_transformers(layout):
    hf = make_hf(layout, dtype=torch.bfloat16)
    layer, pool = make_ours(layout, hf, dtype=torch.bfloat16)
    assert pool.conv[layer.layer_name].dtype == torch.bfloat16
    assert pool.recurrent[layer.layer_name].dtype == torch.float32  # state kept in float32 as HF/fla
    x = torch.randn(72, HIDDEN, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    want = hf_full(hf, x).float()
    outs = step(layer, pool, [(0, x[:70], True)]) + step(layer, pool, [(0, x[70:71], False)]) + \
        step(layer, pool, [(0, x[71:], False)])
    got = torch.cat(outs).float()
    torch.testing.assert_close(got, want)  # bf16 default tolerance (observed: bit-identical to HF)


def test_state_spec_and_bind_errors():
    layer = GatedDeltaNet(HIDDEN, HK, HV, DK, DV, KERNEL, EPS, layer_name="layers.0.linear_attn")
    spec = layer.state_spec()
    assert spec.conv_shape == (2 * HK * DK + HV * DV, KERNEL - 1)
    assert spec.recurrent_shape == (HV, DK, DV)
    assert spec.bytes_per_slot() == (2 * HK * DK + HV * DV) * (KERNEL - 1) * 4 + HV * DK * DV * 4
    assert spec.bytes_per_block(16) == 0 and spec.kind == "recurrent_state"
    with pytest.raises(ValueError, match=r"conv_state has shape \(2, 96, 3\).*expected \[num_slots, 128, 3\]"):
        layer.bind_state(torch.zeros(2, 96, 3), torch.zeros(2, HV, DK, DV))
    with pytest.raises(RuntimeError, match="no state bound"):
        GatedDeltaNet(HIDDEN, HK, HV, DK, DV, KERNEL, EPS)(torch.zeros(1, HIDDEN), StateMetadata.build([1], [0], [True]))
    with pytest.raises(ValueError, match="not a multiple of linear_num_key_heads"):
        GatedDeltaNet(HIDDEN, 3, 4, DK, DV, KERNEL, EPS)
    with pytest.raises(ValueError, match="layout 'qwen3'"):
        GatedDeltaNet(HIDDEN, HK, HV, DK, DV, KERNEL, EPS, layout="qwen3")
    layer.bind_state(*StatePool([spec], 2).tensors()[spec.name])
    with pytest.raises(ValueError, match="share a state slot"):
        layer(torch.zeros(3, HIDDEN), StateMetadata.build([2, 1], [0, 0], [True, True]))


def test_state_pool_bookkeeping():
    from modelgen.runtime.block_manager import CacheFullError
    layer = GatedDeltaNet(HIDDEN, HK, HV, DK, DV, KERNEL, EPS, layer_name="l0")
    pool = StatePool([layer.state_spec()], 2)
    assert pool.bytes_per_slot() == layer.state_spec().bytes_per_slot()
    assert (pool.allocate(10), pool.allocate(11), pool.allocate(10)) == (0, 1, 0)
    with pytest.raises(CacheFullError, match="state pool full: sequence 12 needs a state slot, 0 free of 2"):
        pool.allocate(12)
    pool.recurrent["l0"][1] = 5.0
    pool.free(11)
    pool.free(11)  # idempotent, as BlockManager.release
    assert pool.num_free == 1 and pool.allocate(12) == 1
    assert torch.equal(pool.recurrent["l0"][1], torch.zeros_like(pool.recurrent["l0"][1]))  # zeroed on allocate
    with pytest.raises(KeyError, match="sequence 11 holds no state slot"):
        pool.slot(11)


# --------------------------------------------------------------------------------------------- tensor parallel
SCENARIO_SEED = 6


def _scenario(layer, pool) -> torch.Tensor:
    """Two sequences: a chunked prefill (70 = 40 + 30) interleaved with another's prefill and decode steps."""
    gen = torch.Generator().manual_seed(SCENARIO_SEED)
    a, b = torch.randn(70, HIDDEN, generator=gen), torch.randn(67, HIDDEN, generator=gen)
    outs = step(layer, pool, [(0, a[:40], True), (1, b[:65], True)])
    outs += step(layer, pool, [(1, b[65:66], False), (0, a[40:], False)])
    outs += step(layer, pool, [(1, b[66:], False)])
    return torch.cat(outs)


def _tp_rank(rank: int, world: int, init_file: str, weights: str, layout: str, out: str) -> None:
    import torch.distributed as tdist

    torch.set_num_threads(1)
    tdist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        layer = GatedDeltaNet(HIDDEN, HK, HV, DK, DV, KERNEL, EPS, layout=layout, layer_name="l0")
        load_into(layer, load_file(weights))
        assert layer.num_k_heads == HK // world and layer.state_spec().recurrent_shape == (HV // world, DK, DV)
        pool = StatePool([layer.state_spec()], 2)
        layer.bind_state(*pool.tensors()["l0"])
        save_file({"out": _scenario(layer, pool).contiguous()}, f"{out}.rank{rank}.safetensors")
    finally:
        tdist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_tensor_parallel_2_equals_1(tmp_path, layout):
    hf = make_hf(layout)
    layer, pool = make_ours(layout, hf)
    want = _scenario(layer, pool)
    gen = torch.Generator().manual_seed(SCENARIO_SEED)
    a, b = torch.randn(70, HIDDEN, generator=gen), torch.randn(67, HIDDEN, generator=gen)
    close(want, torch.cat([hf_full(hf, a)[:40], hf_full(hf, b)[:65], hf_full(hf, b)[65:66], hf_full(hf, a)[40:],
                           hf_full(hf, b)[66:]]), "scenario vs HF")
    weights = str(tmp_path / "w.safetensors")
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, weights)
    out = str(tmp_path / "out")
    mp.spawn(_tp_rank, args=(2, str(tmp_path / "init"), weights, layout, out), nprocs=2)
    for rank in range(2):
        close(load_file(f"{out}.rank{rank}.safetensors")["out"], want, f"TP=2 rank {rank}")


@pytest.mark.slow
def test_decode_only_path_is_sync_free_and_equals_host_path():
    """decode_only batches (CUDA-graph decode) run without host reads: torch.compile(fullgraph=True) traces the layer,
    padding rows (slot -1) and padding tokens stay out of the pool, and the result equals the host-routed path."""
    import dataclasses

    torch._dynamo.reset()
    hf = make_hf("qwen3_5")
    layer, pool = make_ours("qwen3_5", hf, num_slots=4)
    gen = torch.Generator().manual_seed(7)
    step(layer, pool, [(0, torch.randn(9, HIDDEN, generator=gen), True), (1, torch.randn(66, HIDDEN, generator=gen), True),
                       (2, torch.randn(3, HIDDEN, generator=gen), True)])
    x = torch.randn(6, HIDDEN, generator=gen)  # 4 rows (one padding) + 2 padding tokens
    meta = StateMetadata.build([1, 1, 1, 1], [0, 2, PAD_SLOT, 1], [False, False, False, False])
    assert meta.decode_only
    name = layer.layer_name
    start = (pool.conv[name].clone(), pool.recurrent[name].clone())
    results = []
    for run in ("host", "static", "compiled"):
        pool.conv[name].copy_(start[0])
        pool.recurrent[name].copy_(start[1])
        with torch.no_grad():
            if run == "host":
                out = layer(x[:4], dataclasses.replace(meta, decode_only=False))
                out = torch.cat([out, torch.zeros(2, HIDDEN)])
            elif run == "static":
                out = layer(x, meta)
            else:
                out = torch.compile(layer, fullgraph=True, dynamic=False)(x, meta)
        results.append((out, pool.conv[name].clone(), pool.recurrent[name].clone()))
    for out, conv, rec in results[1:]:
        torch.testing.assert_close(out, results[0][0], atol=2e-5, rtol=2e-5)
        torch.testing.assert_close(conv, results[0][1], atol=2e-5, rtol=2e-5)
        torch.testing.assert_close(rec, results[0][2], atol=2e-5, rtol=2e-5)
        assert torch.equal(out[2], torch.zeros(HIDDEN)) and torch.equal(out[4:], torch.zeros(2, HIDDEN))
        assert torch.equal(conv[3], start[0][3]) and torch.equal(rec[3], start[1][3])  # unused slot untouched
    assert not torch.equal(results[0][2][0], start[1][0])  # the step did advance real slots


@pytest.mark.parametrize("layout", LAYOUTS)
def test_checkpoint_loader_fills_every_gdn_tensor_and_names_missing_ones(tmp_path, layout):
    """The real packed loader (strict coverage) loads HF-named tensors into the layer; a missing one is named."""
    from modelgen.runtime.loader.checkpoint import Checkpoint, CheckpointError
    from modelgen.runtime.loader.packed import load_packed_weights

    hf = make_hf(layout)
    ref, _ = make_ours(layout, hf)
    ref.process_weights_after_loading()  # the loader runs the post-load hook (layer.FUSED_PROJECTIONS permutes rows)
    block = torch.nn.Module()
    block.linear_attn = GatedDeltaNet(HIDDEN, HK, HV, DK, DV, KERNEL, EPS, layout=layout)
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([block])
    tensors = {f"layers.0.linear_attn.{k}": v.contiguous() for k, v in hf.state_dict().items()}
    packed = QWEN3_5_PACKED_MODULES if layout == "qwen3_5" else {}
    kw = dict(packed_modules_mapping=packed, ignored=(), renames=(), tied={}, num_threads=1)
    (tmp_path / "ok").mkdir()
    save_file(tensors, str(tmp_path / "ok" / "model.safetensors"))
    with Checkpoint(tmp_path / "ok") as ckpt:
        load_packed_weights(model, ckpt, **kw)
    for name, p in ref.named_parameters():
        assert torch.equal(dict(model.named_parameters())[f"layers.0.linear_attn.{name}"], p), name
    drop = "layers.0.linear_attn." + ("in_proj_z.weight" if layout == "qwen3_5" else "dt_bias")
    (tmp_path / "bad").mkdir()
    save_file({k: v for k, v in tensors.items() if k != drop}, str(tmp_path / "bad" / "model.safetensors"))
    want = "in_proj_qkvz.weight (shard 'z')" if layout == "qwen3_5" else "linear_attn.dt_bias"
    with Checkpoint(tmp_path / "bad") as ckpt, pytest.raises(CheckpointError, match=re.escape(want)):
        load_packed_weights(model, ckpt, **kw)
