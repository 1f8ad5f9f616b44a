"""Per-head QK RMSNorm folded into the RoPE / KV-cache-write kernels (issue 16 item 9,
``runtime/layers/attention/kernels.py`` ``qk_norm=``): the fused launches against the unfused sequence (torch RMSNorm of
q and k, then RoPE, then the cache write / attention), and a Qwen3 model whose attention binds its norms to
``PagedAttention`` against transformers.

Skipped without CUDA; ``TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1`` runs them on the CPU through Triton's interpreter.
The reference rounds where the torch path rounds (norm output in the activation dtype) and rotates in float32 with one
rounding, as every RoPE kernel here does, so fp32 agrees to 1e-5 and fp16 to a couple of ulps.
"""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.layers.attention import ops as ref_attn
from modelgen.runtime.ops import norm as ref_norm
from modelgen.runtime.ops.rope import apply_rope, cos_sin_cache
from tests.gpu_helpers import DEV, KERNEL_MARKS, LOW, rel

pytestmark = KERNEL_MARKS

EPS = 1e-6
H, KVH, BS = 8, 2, 8  # GQA: 4 query heads per KV head


def tol(dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 2e-3


def _weights(D, mode, dtype, g):
    """q/k norm weights away from their initial values (so the convention of each mode matters)."""
    base = 0.0 if mode == "zero_centred_rms" else 1.0
    return [(torch.randn(D, device=DEV, generator=g) * 0.3 + base).to(dtype) for _ in range(2)]


def _reference(q, k, qw, kw, mode, cs, pos, rot, style):
    """The unfused sequence: RMSNorm of each head (torch path's rounding), then RoPE in float32 rounded once."""
    zc, f32 = mode == "zero_centred_rms", mode == "rms_float32"
    qn = ref_norm.rms_norm(q, qw, EPS, zc, f32)
    kn = ref_norm.rms_norm(k, kw, EPS, zc, f32)
    return (apply_rope(qn.float(), cs, pos, rot, style).to(q.dtype),
            apply_rope(kn.float(), cs, pos, rot, style).to(k.dtype))


CASES = [  # (dtype, head_dim, rotary_dim, style, mode)
    (torch.float32, 32, 32, "rotate_half", "rms"),
    (torch.float32, 48, 24, "pairwise", "zero_centred_rms"),  # head_dim not a power of two, partial rotary
    (torch.float32, 64, 32, "rotate_half", "rms_float32"),
    (LOW, 64, 64, "rotate_half", "rms"),
    (LOW, 32, 16, "pairwise", "rms"),
    (LOW, 48, 48, "rotate_half", "zero_centred_rms"),
]


@pytest.mark.parametrize("dtype,D,rot,style,mode", CASES)
def test_write_kv_fuses_qk_norm(dtype, D, rot, style, mode):
    from modelgen.runtime.layers.attention import kernels as ga

    g = torch.Generator(device=DEV).manual_seed(D + rot)
    T, NB = 11, 4
    q = (torch.randn(T, H, D, device=DEV, generator=g) * 3).to(dtype)
    k = (torch.randn(T, KVH, D, device=DEV, generator=g) * 3).to(dtype)
    v = torch.randn(T, KVH, D, device=DEV, generator=g).to(dtype)
    qw, kw = _weights(D, mode, dtype, g)
    cs = cos_sin_cache(rot, 10000.0, None, 64).to(DEV)
    pos = torch.randint(0, 64, (T,), device=DEV, generator=g)
    slots = torch.randperm(NB * BS, device=DEV, generator=g)[:T]
    slots[3] = -1  # padding: not written
    kc = torch.zeros(NB, KVH, BS, D, device=DEV, dtype=dtype)
    vc = torch.zeros_like(kc)
    qo, ko = ga.write_kv(k, v, kc, vc, slots, q=q, rope=(pos, cs, rot, style == "pairwise"),
                         qk_norm=(qw, kw, EPS, mode))
    want_q, want_k = _reference(q, k, qw, kw, mode, cs, pos, rot, style)
    assert rel(qo, want_q) < tol(dtype) and rel(ko, want_k) < tol(dtype)
    kr, vr = torch.zeros_like(kc), torch.zeros_like(vc)
    ref_attn.write_paged_kv(want_k, v, kr, vr, slots)
    assert rel(kc, kr) < tol(dtype) and torch.equal(vc, vr)
    # the norm acts: without it the output is far off
    plain_q, _ = ga.write_kv(k, v, kc.clone(), vc.clone(), slots, q=q, rope=(pos, cs, rot, style == "pairwise"))
    assert rel(plain_q, want_q) > 0.05


@pytest.mark.parametrize("dtype,D,rot,style,mode", CASES[::2] + [CASES[3]])
@pytest.mark.parametrize("splits", [1, 3])
def test_decode_fuses_qk_norm(dtype, D, rot, style, mode, splits):
    from modelgen.runtime.layers.attention import kernels as ga

    g = torch.Generator(device=DEV).manual_seed(3 * D + rot)
    B, W = 3, 6
    NB = B * W + 2
    kc = torch.randn(NB, KVH, BS, D, device=DEV, generator=g).to(dtype)
    vc = torch.randn(NB, KVH, BS, D, device=DEV, generator=g).to(dtype)
    tables = torch.randperm(NB, device=DEV, generator=g)[: B * W].view(B, W).int()
    ctx = torch.tensor([1, 13, 40], device=DEV, dtype=torch.int32)
    q = (torch.randn(B, H, D, device=DEV, generator=g) * 3).to(dtype)
    k = (torch.randn(B, KVH, D, device=DEV, generator=g) * 3).to(dtype)
    v = torch.randn(B, KVH, D, device=DEV, generator=g).to(dtype)
    qw, kw = _weights(D, mode, dtype, g)
    cs = cos_sin_cache(rot, 10000.0, None, 64).to(DEV)
    pos = ctx.long() - 1
    slots = tables.long().gather(1, (pos // BS)[:, None])[:, 0] * BS + pos % BS
    want_q, want_k = _reference(q, k, qw, kw, mode, cs, pos, rot, style)
    kr, vr = kc.clone(), vc.clone()
    ref_attn.write_paged_kv(want_k, v, kr, vr, slots)
    want = ref_attn.paged_decode_attention(want_q, kr, vr, tables, ctx, D ** -0.5)
    got = ga.paged_decode(q, k, v, kc, vc, tables, ctx, slots, D ** -0.5, num_splits=splits,
                          rope=(pos, cs, rot, style == "pairwise"), qk_norm=(qw, kw, EPS, mode))
    assert rel(got, want) < tol(dtype)
    assert rel(kc, kr) < tol(dtype) and torch.equal(vc, vr)


def test_qk_norm_needs_rope():
    from modelgen.runtime.layers.attention import kernels as ga

    k = torch.randn(2, KVH, 16, device=DEV)
    w = torch.ones(16, device=DEV)
    kc = torch.zeros(2, KVH, BS, 16, device=DEV)
    with pytest.raises(ValueError, match="fused with RoPE only"):
        ga.write_kv(k, k, kc, kc.clone(), torch.arange(2, device=DEV), q=k, qk_norm=(w, w, EPS, "rms"))


@pytest.mark.parametrize("zero_centred", [False, True])
def test_layer_binds_norms(monkeypatch, zero_centred):
    """``PagedAttention(qk_norm=(q_norm, k_norm))`` hands the norms to both kernels (prefill, then a decode step) and
    matches the same layer fed already-normalised q and k; on the torch path the module order is unchanged."""
    from modelgen.runtime.layers.attention import AttentionMetadata, PagedAttention
    from modelgen.runtime.layers.norm import RMSNorm
    from modelgen.runtime.layers.rotary import RotaryEmbedding
    from modelgen.runtime.layers.attention import kernels as ga

    D, NB = 32, 6
    g = torch.Generator(device=DEV).manual_seed(5)
    norms = []
    for _ in range(2):
        n = RMSNorm(D, EPS, zero_centred=zero_centred).to(DEV)
        n.weight.data.copy_(torch.randn(D, device=DEV, generator=g) * 0.3 + (0.0 if zero_centred else 1.0))
        norms.append(n)
    rope = RotaryEmbedding(D, D, 64, 10000.0, None, "rotate_half").to(DEV)
    fused = PagedAttention(H, KVH, D, D ** -0.5, "layers.0.self_attn", rotary_emb=rope, qk_norm=tuple(norms))
    plain = PagedAttention(H, KVH, D, D ** -0.5, "layers.0.self_attn", rotary_emb=rope)
    for layer in (fused, plain):
        layer.k_cache = torch.zeros(NB, KVH, BS, D, device=DEV)
        layer.v_cache = torch.zeros(NB, KVH, BS, D, device=DEV)
    seen = []
    for name in ("write_kv", "paged_decode"):
        real = getattr(ga, name)
        monkeypatch.setattr(ga, name, lambda *a, _r=real, _n=name, **kw: seen.append((_n, kw.get("qk_norm") is not None))
                            or _r(*a, **kw))
    table = torch.tensor([[2, 4]], device=DEV, dtype=torch.int32)
    T = 9
    q = torch.randn(T, H, D, device=DEV, generator=g) * 2
    k = torch.randn(T, KVH, D, device=DEV, generator=g) * 2
    v = torch.randn(T, KVH, D, device=DEV, generator=g)
    pos = torch.arange(T, device=DEV)
    slots = table.long()[0, pos // BS] * BS + pos % BS
    meta = AttentionMetadata(is_prefill=True, slot_mapping=slots, cu_seqlens_q=torch.tensor([0, T], device=DEV,
                             dtype=torch.int32), context_lens=torch.tensor([T], device=DEV, dtype=torch.int32),
                             block_tables=table, max_seqlen_q=T)
    got = fused(q, k, v, meta, positions=pos)
    want = plain(norms[0](q), norms[1](k), v, meta, positions=pos)
    assert rel(got, want) < 1e-5
    q1, k1, v1 = q[:1] * 0.5, k[:1] * 0.5, v[:1]
    p1 = torch.tensor([T], device=DEV)
    meta1 = AttentionMetadata(is_prefill=False, slot_mapping=table.long()[0, 1:2] * BS + T % BS,
                              cu_seqlens_q=torch.tensor([0, 1], device=DEV, dtype=torch.int32),
                              context_lens=torch.tensor([T + 1], device=DEV, dtype=torch.int32), block_tables=table,
                              max_seqlen_q=1)
    got = fused(q1, k1, v1, meta1, positions=p1)
    want = plain(norms[0](q1), norms[1](k1), v1, meta1, positions=p1)
    assert rel(got, want) < 1e-5
    assert rel(fused.k_cache, plain.k_cache) < 1e-5
    assert seen == [("write_kv", True), ("write_kv", False), ("paged_decode", True), ("paged_decode", False)]


# ----------------------------------------------------------------------------------------- Qwen3 end to end vs HF
def _qwen3_checkpoint(path):
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=256, initializer_range=0.1, bos_token_id=1,
        eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    config._attn_implementation = "eager"
    model = transformers.Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        for n, t in model.named_parameters():
            if "norm" in n:  # q_norm / k_norm (and the layer norms) off their initial ones: the norm weights act
                t.copy_(torch.randn_like(t) * 0.3 + 1.0)
    model.save_pretrained(path)
    return model


def test_qwen3_gpu_path_matches_transformers(tmp_path, monkeypatch):
    """A tiny Qwen3 on the Triton path (q_norm/k_norm inside the cache-write and decode kernels): fp32 prefill logits
    within 1e-4 of transformers and 6 greedy tokens equal to HF's."""
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams
    from modelgen.runtime.layers.attention import kernels as ga
    from tests.test_parity_llama import hf_greedy, hf_logits

    hf = _qwen3_checkpoint(tmp_path)
    prompt = [int(t) for t in torch.randint(3, 160, (12,), generator=torch.Generator().manual_seed(1))]
    fused = []
    for name in ("write_kv", "paged_decode"):
        real = getattr(ga, name)
        monkeypatch.setattr(ga, name, lambda *a, _r=real, **kw: fused.append(kw.get("qk_norm") is not None)
                            or _r(*a, **kw))
    engine = LLM(tmp_path, target="rocm", dtype="float32", max_model_len=64, device=DEV)
    got = engine.score(prompt)
    want = hf_logits(hf, prompt)
    torch.testing.assert_close(got.float().cpu(), want, atol=1e-4, rtol=1e-4)
    out = engine.generate([prompt], SamplingParams(max_new_tokens=6, ignore_eos=True))[0]
    assert out == hf_greedy(hf, prompt, 6)
    assert fused and all(fused)
