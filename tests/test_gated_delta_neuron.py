"""Static-shape Gated DeltaNet mixer (neuron target): equals the eager rocm layer on padded buckets, padding rows and
empty slots never touch the pools, and each bucket traces with fullgraph=True and serves new data without recompiling."""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.layers.gated_deltanet import neuron as ngd
from modelgen.runtime.layers.gated_deltanet import ops as gd
from modelgen.runtime.state_cache import PAD_SLOT, StateMetadata, StatePool
from tests.test_gated_deltanet_layer import HIDDEN, make_hf, make_ours

R = 4  # rows of every bucket (max_num_seqs)


def static_forward(layer, hidden, seq_ids, slots, fresh, conv_pool, rec_pool, decode: bool, chunk_size: int = 64):
    """What a neuron template does with the layer's weights: projections, split, gates, static mixer, norm, out."""
    heads = (layer.num_k_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim)
    mixed, z, b, a = gd.split_projections(layer.in_proj_qkvz(hidden), layer.in_proj_ba(hidden), layer.layout, *heads)
    g, beta = gd.gdn_gating(layer.A_log, a, layer.dt_bias, b)
    core = ngd.gdn_mixer_static(
        mixed, g, beta, layer.conv1d.weight.squeeze(1), conv_pool, rec_pool, seq_ids, slots, fresh,
        num_k_heads=layer.num_k_heads, head_k_dim=layer.head_k_dim, head_v_dim=layer.head_v_dim, decode=decode,
        chunk_size=chunk_size,
    )
    o = layer.norm(core.reshape(-1, layer.head_v_dim), z.reshape(-1, layer.head_v_dim))
    return layer.out_proj(o.reshape(hidden.shape[0], -1))


def bucket(segments, tokens: int, decode: bool):
    """Runner-style padded inputs. ``segments``: (slot, hidden [n, H], fresh) per real row, in row order."""
    xs, seq_ids = [], []
    for r, (_, x, _) in enumerate(segments):
        xs.append(x)
        seq_ids += [r] * x.shape[0]
    pad = tokens - len(seq_ids)
    xs.append(torch.randn(pad, HIDDEN))  # padding tokens carry arbitrary embeddings
    seq_ids += [-1] * pad
    empty = R - len(segments)
    slots = [s for s, _, _ in segments] + [PAD_SLOT] * empty
    fresh = [f for _, _, f in segments] + [True] * empty
    return (torch.cat(xs), torch.tensor(seq_ids), torch.tensor(slots), torch.tensor(fresh))


def eager(layer, segments):
    meta = StateMetadata.build([x.shape[0] for _, x, _ in segments], [s for s, _, _ in segments],
                               [f for _, _, f in segments])
    with torch.no_grad():
        return layer(torch.cat([x for _, x, _ in segments]), meta)


def _scenario(gen):
    a, b, c = (torch.randn(n, HIDDEN, generator=gen) for n in (70, 71, 20))
    return [
        (False, 128, [(0, a, True), (2, b[:40], True)]),  # two fresh prompts, two empty rows, 18 padding tokens
        (False, 128, [(2, b[40:70], False), (1, c, True)]),  # a chunk continuing + a fresh prompt
        (True, R, [(0, torch.randn(1, HIDDEN, generator=gen), False), (2, b[70:], False),
                   (1, torch.randn(1, HIDDEN, generator=gen), False)]),  # decode bucket, one empty row
    ]


@pytest.mark.parametrize("layout", ["qwen3_next", "qwen3_5"])
def test_static_mixer_equals_eager_layer(layout):
    hf = make_hf(layout)
    layer, pool = make_ours(layout, hf, num_slots=4)  # eager reference pool
    static_pool = StatePool([layer.state_spec()], 4)
    conv_s, rec_s = static_pool.tensors()[layer.layer_name]
    conv_s[3].normal_()  # slot 3 belongs to no row: must stay bit-for-bit
    rec_s[3].normal_()
    untouched = (conv_s[3].clone(), rec_s[3].clone())
    for decode, tokens, segments in _scenario(torch.Generator().manual_seed(0)):
        want = eager(layer, segments)
        x, seq_ids, slots, fresh = bucket(segments, tokens, decode)
        with torch.no_grad():
            got = static_forward(layer, x, seq_ids, slots, fresh, conv_s, rec_s, decode)
        n = want.shape[0]
        torch.testing.assert_close(got[:n], want, atol=2e-5, rtol=2e-5)
        assert torch.equal(got[n:], torch.zeros_like(got[n:]))  # padding tokens: zero output
        conv_e, rec_e = pool.tensors()[layer.layer_name]
        torch.testing.assert_close(conv_s[:3], conv_e[:3], atol=2e-5, rtol=2e-5)
        torch.testing.assert_close(rec_s[:3], rec_e[:3], atol=2e-5, rtol=2e-5)
    assert torch.equal(conv_s[3], untouched[0]) and torch.equal(rec_s[3], untouched[1])


def test_write_state_rows_leaves_invalid_rows_exact():
    pool = torch.randn(4, 2, 2)
    pool[3] = float("nan")  # garbage in a slot nobody writes must not spread
    before = pool.clone()
    new = torch.randn(3, 2, 2)
    ngd.write_state_rows(pool, torch.tensor([2, -1, 0]), torch.tensor([True, False, True]), new)
    assert torch.equal(pool[2], new[0]) and torch.equal(pool[0], new[2]) and torch.equal(pool[1], before[1])
    assert torch.isnan(pool[3]).all()
    ngd.write_state_rows(pool, torch.tensor([-1, 1]), torch.tensor([False, False]), torch.randn(2, 2, 2))
    assert torch.equal(pool[:3], torch.stack([new[2], before[1], new[0]]))  # nothing valid: nothing changes
    fresh_into_garbage = torch.randn(1, 2, 2)
    ngd.write_state_rows(pool, torch.tensor([3]), torch.tensor([True]), fresh_into_garbage)
    assert torch.equal(pool[3], fresh_into_garbage[0])


@pytest.mark.slow
def test_buckets_trace_fullgraph_without_recompiles():
    torch._dynamo.reset()
    hf = make_hf("qwen3_next")
    layer, _ = make_ours("qwen3_next", hf)
    pool = StatePool([layer.state_spec()], 4)
    conv, rec = pool.tensors()[layer.layer_name]

    def fwd(x, seq_ids, slots, fresh, decode: bool):
        return static_forward(layer, x, seq_ids, slots, fresh, conv, rec, decode, chunk_size=16)

    compiled = torch.compile(fwd, fullgraph=True, dynamic=False)  # a graph break raises
    gen = torch.Generator().manual_seed(1)

    def inputs(decode: bool, fresh_flag: bool):
        if decode:
            segs = [(0, torch.randn(1, HIDDEN, generator=gen), False), (2, torch.randn(1, HIDDEN, generator=gen), False)]
            return bucket(segs, R, True)
        segs = [(0, torch.randn(11, HIDDEN, generator=gen), fresh_flag), (2, torch.randn(20, HIDDEN, generator=gen), True)]
        return bucket(segs, 40, False)

    with torch.no_grad():
        for decode in (False, True):  # warm-up: one graph per bucket
            compiled(*inputs(decode, True), decode)
        torch.compiler.set_stance("fail_on_recompile")
        try:
            for decode, fresh_flag in ((False, False), (True, False), (False, True)):
                args = inputs(decode, fresh_flag)
                saved = (conv.clone(), rec.clone())
                got = compiled(*args, decode)
                after = (conv.clone(), rec.clone())
                conv.copy_(saved[0])
                rec.copy_(saved[1])
                want = fwd(*args, decode)  # eager static path from the same states
                torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
                torch.testing.assert_close(after[0], conv, atol=2e-5, rtol=2e-5)
                torch.testing.assert_close(after[1], rec, atol=2e-5, rtol=2e-5)
        finally:
            torch.compiler.set_stance("default")


@pytest.mark.parametrize("layout", ["qwen3_next", "qwen3_5"])
def test_neuron_loaders_match_rocm_shards(tmp_path, monkeypatch, layout):
    """The neuron closure loader gives each rank the transposed twin of the rocm layer's shard (TP=2 simulated)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from modelgen.runtime import distributed as dist
    from modelgen.runtime.layers.gated_deltanet import GatedDeltaNet
    from tests.test_gated_deltanet_layer import DK, DV, EPS, HK, HV, KERNEL, load_into

    hf = make_hf(layout)
    sd = {k: v.contiguous() for k, v in hf.state_dict().items()}
    save_file(sd, str(tmp_path / "w.safetensors"))
    K, V = HK * DK, HV * DV
    if layout == "qwen3_next":
        tensors = {"in_proj_qkvz.weight": (["in_proj_qkvz.weight"], [[2 * K + 2 * V]]),
                   "in_proj_ba.weight": (["in_proj_ba.weight"], [[2 * HV]])}
    else:
        tensors = {"in_proj_qkvz.weight": (["in_proj_qkv.weight", "in_proj_z.weight"], [[K, K, V], [V]]),
                   "in_proj_ba.weight": (["in_proj_b.weight", "in_proj_a.weight"], [[HV], [HV]])}
    tensors.update({"conv1d.weight": (["conv1d.weight"], [[K, K, V]]), "A_log": (["A_log"], [[HV]]),
                    "dt_bias": (["dt_bias"], [[HV]])})
    with safe_open(str(tmp_path / "w.safetensors"), "pt") as f:
        for rank in range(2):
            monkeypatch.setattr(dist, "tp_size", lambda: 2)
            monkeypatch.setattr(dist, "tp_rank", lambda r=rank: r)
            layer = GatedDeltaNet(HIDDEN, HK, HV, DK, DV, KERNEL, EPS, layout=layout)
            load_into(layer, sd)
            params = dict(layer.named_parameters())
            for name, (keys, parts) in tensors.items():
                loader = ngd.head_parts_weight_loader(parts, 2, is_storage_transposed=True)
                got = loader.transform([f.get_slice(k) for k in keys], rank)
                want = params[name].data
                assert torch.equal(got, want.t() if want.dim() == 2 else want), (name, rank)
