"""runtime/layers/mla/ops.py: the weight-absorbed latent attention equals the un-absorbed decompression (HF's
``DeepseekV3Attention.expand_kv`` math, written out here), paged and static variants agree, and the softmax scale
folds YaRN's mscale_all_dim in exactly as transformers does."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from modelgen.runtime.layers.mla import ops as mla

H, DN, DR, DV, R = 3, 8, 4, 6, 10
D = R + DR


def unabsorbed(q_nope, q_pe, c, k_pe, kv_b, scale, q_pos, k_pos):
    """Reference: decompress every cached latent through kv_b_proj into per-head K/V, then plain causal attention.
    q_nope [n, H, DN], q_pe [n, H, DR], c [L, R], k_pe [L, DR]; token i attends key j when k_pos[j] <= q_pos[i]."""
    kv = (c @ kv_b.t()).view(-1, H, DN + DV)
    k = torch.cat([kv[..., :DN], k_pe[:, None, :].expand(-1, H, -1)], dim=-1)  # [L, H, DN + DR]
    v = kv[..., DN:]
    q = torch.cat([q_nope, q_pe], dim=-1)
    mask = k_pos[None, :] <= q_pos[:, None]
    o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask,
                                       scale=scale)
    return o.transpose(0, 1)  # [n, H, DV]


def absorbed_q(q_nope, q_pe, kv_b):
    w_uk, w_uv = mla.split_kv_b(kv_b, H, DN, DV)
    return torch.cat([mla.absorb_query(q_nope, w_uk), q_pe], dim=-1), w_uv


@pytest.fixture
def case():
    g = torch.Generator().manual_seed(0)
    lens = [13, 1, 9]  # context lengths of three sequences
    block_size, num_blocks = 4, 12
    perm = torch.randperm(num_blocks, generator=g)  # scattered physical blocks
    tables, used = torch.zeros(3, 4, dtype=torch.int32), 0
    for b, n in enumerate(lens):
        k = -(-n // block_size)
        tables[b, :k] = perm[used:used + k]
        used += k
    latents = [torch.randn(n, D, generator=g, dtype=torch.float64) for n in lens]
    cache = torch.zeros(num_blocks, block_size, D, dtype=torch.float64)
    for b, lat in enumerate(latents):
        pos = torch.arange(len(lat))
        slots = tables[b, pos // block_size].long() * block_size + pos % block_size
        mla.write_latent(lat, cache, slots)
    kv_b = torch.randn(H * (DN + DV), R, generator=g, dtype=torch.float64) / math.sqrt(R)
    return dict(lens=lens, tables=tables, latents=latents, cache=cache, kv_b=kv_b, g=g)


def test_absorbed_prefill_equals_unabsorbed_over_paged_chunks(case):
    """Each sequence's last n tokens are the query chunk (chunked prefill over earlier cached latents)."""
    g, lens, scale = case["g"], case["lens"], 0.37
    new = [5, 1, 9]
    q_nope = torch.randn(sum(new), H, DN, generator=g, dtype=torch.float64)
    q_pe = torch.randn(sum(new), H, DR, generator=g, dtype=torch.float64)
    q, w_uv = absorbed_q(q_nope, q_pe, case["kv_b"])
    cu = torch.tensor([0, 5, 6, 15], dtype=torch.int32)
    o = mla.expand_output(mla.paged_prefill(q, case["cache"], cu, torch.tensor(lens), case["tables"], scale, R), w_uv)
    for b, n in enumerate(new):
        lat, s = case["latents"][b], cu[b].item()
        want = unabsorbed(q_nope[s:s + n], q_pe[s:s + n], lat[:, :R], lat[:, R:], case["kv_b"], scale,
                          torch.arange(lens[b] - n, lens[b]), torch.arange(lens[b]))
        torch.testing.assert_close(o[s:s + n], want, atol=1e-12, rtol=1e-12)


def test_absorbed_decode_equals_unabsorbed(case):
    g, lens, scale = case["g"], case["lens"], 0.21
    q_nope = torch.randn(3, H, DN, generator=g, dtype=torch.float64)
    q_pe = torch.randn(3, H, DR, generator=g, dtype=torch.float64)
    q, w_uv = absorbed_q(q_nope, q_pe, case["kv_b"])
    o = mla.expand_output(mla.paged_decode(q, case["cache"], case["tables"], torch.tensor(lens), scale, R), w_uv)
    for b in range(3):
        lat = case["latents"][b]
        want = unabsorbed(q_nope[b:b + 1], q_pe[b:b + 1], lat[:, :R], lat[:, R:], case["kv_b"], scale,
                          torch.tensor([lens[b] - 1]), torch.arange(lens[b]))
        torch.testing.assert_close(o[b:b + 1], want, atol=1e-12, rtol=1e-12)


def test_static_variants_equal_paged(case):
    """Neuron's shape-static ops: the segment and decode paths over the cache, the packed path over the bucket's own
    latents, each equal to the eager paged prefill; padding tokens (seq -1) leave outputs of real tokens alone."""
    g, lens, scale = case["g"], case["lens"], 0.5
    q = torch.randn(sum(lens) + 2, H, D, generator=g, dtype=torch.float64)  # two padding rows at the end
    seq_ids = torch.tensor(sum(([b] * n for b, n in enumerate(lens)), []) + [-1, -1])
    positions = torch.cat([torch.arange(n) for n in lens] + [torch.zeros(2, dtype=torch.long)])
    cu = torch.tensor([0, 13, 14, 23], dtype=torch.int32)
    want = mla.paged_prefill(q[:-2], case["cache"], cu, torch.tensor(lens), case["tables"], scale, R)
    seg = mla.segment_prefill(q, case["cache"], case["tables"], seq_ids, positions, scale, R)
    torch.testing.assert_close(seg[:-2], want, atol=1e-12, rtol=1e-12)
    latent = torch.cat(case["latents"] + [torch.randn(2, D, generator=g, dtype=torch.float64)])
    packed = mla.packed_prefill(q, latent, seq_ids, positions, scale, R)
    torch.testing.assert_close(packed[:-2], want, atol=1e-12, rtol=1e-12)
    last = cu[1:].long() - 1
    dec = mla.paged_decode(q[last], case["cache"], case["tables"], torch.tensor(lens), scale, R)
    torch.testing.assert_close(dec, want[last], atol=1e-12, rtol=1e-12)


def test_static_write_equals_eager_and_skips_padding(case):
    g = case["g"]
    latent = torch.randn(5, D, generator=g, dtype=torch.float64)
    slots = torch.tensor([3, -1, 17, 40, -1])
    eager, static = case["cache"].clone(), case["cache"].clone()
    mla.write_latent(latent, eager, slots)
    mla.write_latent_static(latent, static, slots)
    assert torch.equal(eager, static)
    assert torch.equal(eager.view(-1, D)[17], latent[2]) and not torch.equal(eager, case["cache"])


@pytest.mark.parametrize("rope", [
    None,
    {"rope_type": "yarn", "rope_theta": 1e4, "factor": 40.0, "original_max_position_embeddings": 4096,
     "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1},  # DeepSeek-V3's own rope_scaling
    {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 128,
     "mscale": 0.707, "mscale_all_dim": 0.5},
    {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 128},  # no mscale
])
def test_softmax_scale_equals_transformers(rope):
    import transformers
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    cfg = transformers.DeepseekV3Config(hidden_size=32, num_attention_heads=2, kv_lora_rank=8, q_lora_rank=None,
                                        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
                                        max_position_embeddings=512,
                                        rope_parameters=rope)
    want = DeepseekV3Attention(cfg, 0).scaling
    ours = mla.softmax_scale(12, None if rope is None else rope)
    assert ours == pytest.approx(want, rel=1e-12)
    if rope and rope.get("mscale_all_dim"):
        assert ours > 12 ** -0.5 * 1.05  # the fold is there, not a coincidence of defaults


# ------------------------------------------------------------------------------------------------------------- DSA
HI, DI, TOPK = 3, 5, 4


def dsa_reference(q_nope, q_pe, q_idx, w, lat, kv_b, scale, q_pos):
    """DeepSeek's published DSA semantics, per query, independent of the ops: index scores over the causal keys only,
    top-TOPK of those, then the un-absorbed attention over the selected keys."""
    outs = []
    for i, p in enumerate(q_pos.tolist()):
        keys = lat[: p + 1]
        score = (w[i, :, None] * (q_idx[i] @ keys[:, R + DR:].t()).relu()).sum(0)  # [p + 1]
        chosen = score.topk(min(TOPK, p + 1)).indices.sort().values
        sel = keys[chosen]
        outs.append(unabsorbed(q_nope[i:i + 1], q_pe[i:i + 1], sel[:, :R], sel[:, R:R + DR], kv_b, scale,
                               torch.tensor([0]), torch.zeros(len(chosen), dtype=torch.long)))
    return torch.cat(outs)


def test_dsa_ops_equal_the_reference_on_every_path():
    """Chunked paged prefill, paged decode, neuron's segment / packed paths with the index: each equals the
    reference. Index queries/keys are positive so relu never ties scores at zero (top-k is then unambiguous)."""
    g = torch.Generator().manual_seed(1)
    f64 = dict(generator=g, dtype=torch.float64)
    n_ctx, new, block_size = 11, 6, 4
    lat = torch.randn(n_ctx, D + DI, **f64)
    lat[:, D:] = lat[:, D:].abs()
    table = torch.tensor([[2, 0, 5]], dtype=torch.int32)
    cache = torch.zeros(6, block_size, D + DI, dtype=torch.float64)
    pos = torch.arange(n_ctx)
    mla.write_latent(lat, cache, table[0, pos // block_size].long() * block_size + pos % block_size)
    kv_b = torch.randn(H * (DN + DV), R, **f64) / math.sqrt(R)
    q_nope, q_pe = torch.randn(n_ctx, H, DN, **f64), torch.randn(n_ctx, H, DR, **f64)
    q_idx, w = torch.randn(n_ctx, HI, DI, **f64).abs(), torch.randn(n_ctx, HI, **f64)
    q, w_uv = absorbed_q(q_nope, q_pe, kv_b)
    scale = 0.3
    want = dsa_reference(q_nope, q_pe, q_idx, w, lat, kv_b, scale, pos)
    full = (q_idx, w, TOPK)
    last = slice(n_ctx - new, n_ctx)  # a chunk continuing over 5 cached latents
    chunk = mla.paged_prefill(q[last], cache, torch.tensor([0, new], dtype=torch.int32), torch.tensor([n_ctx]),
                              table, scale, R, (q_idx[last], w[last], TOPK))
    torch.testing.assert_close(mla.expand_output(chunk, w_uv), want[last], atol=1e-12, rtol=1e-12)
    dec = mla.paged_decode(q[-1:], cache, table, torch.tensor([n_ctx]), scale, R, (q_idx[-1:], w[-1:], TOPK))
    torch.testing.assert_close(mla.expand_output(dec, w_uv), want[-1:], atol=1e-12, rtol=1e-12)
    seq = torch.zeros(n_ctx, dtype=torch.long)
    seg = mla.segment_prefill(q, cache, table, seq, pos, scale, R, full)
    torch.testing.assert_close(mla.expand_output(seg, w_uv), want, atol=1e-12, rtol=1e-12)
    packed = mla.packed_prefill(q, lat, seq, pos, scale, R, full)
    torch.testing.assert_close(mla.expand_output(packed, w_uv), want, atol=1e-12, rtol=1e-12)
    dense = mla.packed_prefill(q, lat, seq, pos, scale, R)
    assert (dense[TOPK:] - packed[TOPK:]).abs().max() > 1e-3  # past TOPK keys the selection drops some
    torch.testing.assert_close(dense[:TOPK], packed[:TOPK], atol=1e-12, rtol=1e-12)
