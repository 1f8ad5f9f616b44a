"""Module-level three-way accuracy tests (vLLM Neuron onboarding guide, "Module tests" + "Three-way comparison").

Each building block runs on the *same* inputs three times: the transformers module in fp32 (gold), the same module
in bf16 (floor: the error bf16 alone costs) and modelgen's module in bf16, on both targets where one exists:

  block                          transformers                         rocm (runtime/layers, generated)   neuron (NF ops, generated)
  RMSNorm / + fused residual     LlamaRMSNorm                         layers.norm.RMSNorm                NF.rms_norm (no fused form)
  RoPE rotate_half / partial     Llama / Glm4Moe rotary + apply       layers.rotary (get_rope)           NF.rope + model's cos/sin table
  RoPE pairwise partial          Glm (glm/modeling_glm.py)            RotaryEmbedding(style=pairwise)    NF.rope(style=pairwise)
  GQA attention, paged prefill   LlamaAttention (+ bias),             generated LlamaAttention,          generated ...
                                 Glm4MoeAttention (QK norm, partial)  Glm4MoeAttention
    + a decode step over the cache
  gated MLP                      LlamaMLP (+ bias)                    generated LlamaMLP                 generated LlamaMLP
  MoE softmax top-k              Qwen3MoeSparseMoeBlock               generated Qwen3MoeSparseMoeBlock   generated ...
  MoE sigmoid grouped + shared   Glm4MoeMoE                           generated Glm4MoeSparseMoeBlock    generated ...

With a CUDA device the rocm modules also run there (``rocm-cuda``: the Triton kernels of ``runtime/ops/gpu``).

The modelgen modules are taken from a model built by ``LLM`` from a saved checkpoint, so their weights arrive
through the real loaders (fused QKV / gate-up shard ids on rocm, transposed closure loaders on neuron, stacked
experts) -- a layout bug in a loader fails here at module level.

Weights: the fixtures' HF init (std 0.02) makes attention scores ~0 (softmax uniform, RoPE invisible) and
outputs ~1e-2; ``initializer_range=0.2`` gives O(1) activations and peaked attention, so the comparisons see what
a trained model would exercise. ``atol`` is relative (1e-3 x max|gold|, a quarter of bf16's 2^-8 step) so it only
matters where bf16 happens to represent the result exactly.
"""
from __future__ import annotations

import copy

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.testing import assert_close_three_way
from tests.llama_fixtures import make_llama
from tests.moe_fixtures import BASE, CASES

# "rocm-cuda": the rocm modules on a CUDA GPU, where they run the Triton kernels of runtime/ops/gpu (fused
# add+RMSNorm, RoPE, paged prefill/decode attention, MoE); HF gold and floor stay on the CPU.
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
TARGETS = ["rocm", "neuron", pytest.param("rocm-cuda", marks=CUDA)]
INIT = 0.2
FACTOR = 2.0  # ours may be at most twice as far from fp32 as HF's own bf16 run
ATOL_REL = 1e-3


def _dev(target: str) -> str:
    return "cuda" if target == "rocm-cuda" else "cpu"


def _rocm(target: str) -> bool:
    return target.startswith("rocm")


def check(gold, floor, ours, name: str):
    gold = gold.float()
    return assert_close_three_way(gold, floor, ours, factor=FACTOR, atol=ATOL_REL * gold.abs().max().item(), name=name)


def _randn(*shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def _save_moe(path, name: str):
    """moe_fixtures.make_moe with initializer_range=INIT (make_moe has no config overrides)."""
    import transformers

    cfg_cls, model_cls, extra = CASES[name]
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(getattr(transformers, cfg_cls)(**BASE, **extra, initializer_range=INIT))
    model.eval()
    with torch.no_grad():
        for n, t in list(model.named_parameters()) + list(model.named_buffers()):
            if n.endswith(".bias") or "e_score_correction_bias" in n:
                t.normal_(0, 0.1)
    model.save_pretrained(path)
    return model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(name, target) -> (fp32 HF, bf16 HF copy, modelgen LLM in bf16); built once per module."""
    cache: dict = {}

    def get(name: str, target: str):
        if name not in cache:
            d = tmp_path_factory.mktemp(f"three_way_{name}")
            if name == "llama":  # GQA 4/2 with attention and MLP biases
                hf = make_llama(d, "bias", initializer_range=INIT)
            else:
                hf = _save_moe(d, name)
            cache[name] = (d, hf, copy.deepcopy(hf).to(torch.bfloat16))
        key = (name, target)
        if key not in cache:
            # block_size 4: the test sequences span several, non-contiguous blocks.
            cache[key] = LLM(cache[name][0], target=target.split("-")[0], dtype="bfloat16", max_model_len=64,
                             block_size=4, device=_dev(target))
        d, hf, hf16 = cache[name]
        return hf, hf16, cache[key]

    return get


# ------------------------------------------------------------------------------------------------------------ RMSNorm
def _norm_pair(hidden: int = 64, eps: float = 1e-5):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    hf = LlamaRMSNorm(hidden, eps=eps)
    with torch.no_grad():
        hf.weight.copy_(1.0 + _randn(hidden, seed=1, scale=0.1))  # HF init is ones: a dropped weight would pass
    return hf, copy.deepcopy(hf).to(torch.bfloat16)


@pytest.mark.parametrize("target", TARGETS)
def test_rms_norm(target):
    import modelgen.runtime.targets.neuron.functional as NF
    from modelgen.runtime.layers.norm import RMSNorm

    hf, hf16 = _norm_pair()
    x = _randn(24, 64, seed=2, scale=3.0)
    gold, floor = hf(x), hf16(x.bfloat16())
    if _rocm(target):
        ours_mod = RMSNorm(64, eps=1e-5).to(_dev(target), torch.bfloat16)
        ours_mod.weight.data.copy_(hf16.weight)
        ours = ours_mod(x.to(_dev(target), torch.bfloat16))
    else:
        ours = NF.rms_norm(x.bfloat16(), hf16.weight, 1e-5)
    assert ours.dtype == torch.bfloat16
    check(gold, floor, ours, f"rms_norm/{target}")


@pytest.mark.parametrize("target", ["rocm", pytest.param("rocm-cuda", marks=CUDA)])
def test_rms_norm_fused_residual_add(target):
    """rocm's ``norm(x, residual) -> (norm(x + residual), x + residual)`` vs HF's decoder layer order (the residual
    add in the model dtype, then the norm); neuron adds the residual in the layer, as HF does."""
    from modelgen.runtime.layers.norm import RMSNorm

    hf, hf16 = _norm_pair()
    x, r = _randn(24, 64, seed=3), _randn(24, 64, seed=4, scale=2.0)
    gold_res = x + r
    floor_res = x.bfloat16() + r.bfloat16()
    dev = _dev(target)
    ours_mod = RMSNorm(64, eps=1e-5).to(dev, torch.bfloat16)
    ours_mod.weight.data.copy_(hf16.weight)
    ours_normed, ours_res = ours_mod(x.to(dev, torch.bfloat16), r.to(dev, torch.bfloat16))
    check(gold_res, floor_res, ours_res, f"add_rms_norm/residual/{target}")
    check(hf(gold_res), hf16(floor_res), ours_normed, f"add_rms_norm/normed/{target}")


# --------------------------------------------------------------------------------------------------------------- RoPE
POSITIONS = torch.tensor([0, 1, 2, 7, 31, 64, 100, 127, 128, 200, 254, 255])  # large angles stress bf16 cos/sin


def _hf_rope(rotary_emb, apply, q: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """HF's RoPE on ``q [T, heads, D]``: cos/sin from the fp32 rotary module cast to ``dtype`` (what HF's rotary
    forward returns for inputs of that dtype), rotation in ``dtype``."""
    x = q.to(dtype).transpose(0, 1)[None]  # [1, heads, T, D]
    cos, sin = rotary_emb(x, POSITIONS[None])
    out, _ = apply(x, x, cos, sin)
    return out[0].transpose(0, 1)


def _ours_rope(target: str, q: torch.Tensor, table: torch.Tensor, rotary_dim: int, style: str, module=None):
    import modelgen.runtime.targets.neuron.functional as NF

    if _rocm(target):
        dev = _dev(target)
        q = q.to(dev)
        out, _ = module.to(dev)(POSITIONS.to(dev), q, q.clone())
        return out.cpu()
    return NF.rope(q, table, POSITIONS, rotary_dim, style)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["llama", "glm4_moe_plain"])  # full and partial (0.5) rotate_half
def test_rope_rotate_half(models, name, target):
    hf, _, llm = models(name, target)
    if name == "llama":
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    else:
        from transformers.models.glm4_moe.modeling_glm4_moe import apply_rotary_pos_emb
    head_dim = llm.config.head_dim
    attn = llm.model.model.layers[0].self_attn
    rotary_dim = attn.rotary_emb.rotary_dim if _rocm(target) else attn.rotary_dim
    assert rotary_dim == (head_dim if name == "llama" else head_dim // 2)
    q = _randn(len(POSITIONS), 4, head_dim, seed=5, scale=2.0)
    gold = _hf_rope(hf.model.rotary_emb, apply_rotary_pos_emb, q, torch.float32)
    floor = _hf_rope(hf.model.rotary_emb, apply_rotary_pos_emb, q, torch.bfloat16)
    table = None if _rocm(target) else llm.model.model.rope_cos_sin
    ours = _ours_rope(target, q.bfloat16(), table, rotary_dim, "rotate_half", getattr(attn, "rotary_emb", None))
    check(gold, floor, ours, f"rope/{name}/{target}")
    if rotary_dim < head_dim:  # the pass-through half is untouched (bit-exact in bf16)
        assert torch.equal(ours[..., rotary_dim:], q.bfloat16()[..., rotary_dim:])


@pytest.mark.parametrize("target", TARGETS)
def test_rope_pairwise_partial(target):
    """GLM (dense) interleaves: element 2i pairs with 2i + 1, over the first half of each head."""
    from transformers import GlmConfig
    from transformers.models.glm.modeling_glm import GlmRotaryEmbedding, apply_rotary_pos_emb

    from modelgen.runtime.layers.rotary import RotaryEmbedding
    from modelgen.runtime.ops.rope import cos_sin_cache

    head_dim, theta, max_pos = 32, 10000.0, 256
    cfg = GlmConfig(hidden_size=128, num_attention_heads=4, head_dim=head_dim, max_position_embeddings=max_pos,
                    partial_rotary_factor=0.5)
    rotary = GlmRotaryEmbedding(cfg)
    rotary_dim = head_dim // 2
    assert rotary.inv_freq.numel() == rotary_dim // 2
    q = _randn(len(POSITIONS), 4, head_dim, seed=6, scale=2.0)
    gold = _hf_rope(rotary, apply_rotary_pos_emb, q, torch.float32)
    floor = _hf_rope(rotary, apply_rotary_pos_emb, q, torch.bfloat16)
    module = RotaryEmbedding(head_dim, rotary_dim, max_pos, theta, None, style="pairwise")
    ours = _ours_rope(target, q.bfloat16(), cos_sin_cache(rotary_dim, theta, None, max_pos), rotary_dim, "pairwise",
                      module)
    check(gold, floor, ours, f"rope/pairwise/{target}")
    # Guard against a vacuous pass: rotate_half on the same input is far outside the bound.
    wrong = _ours_rope(target, q.bfloat16(), cos_sin_cache(rotary_dim, theta, None, max_pos), rotary_dim,
                       "rotate_half", RotaryEmbedding(head_dim, rotary_dim, max_pos, theta, None, style="rotate_half"))
    with pytest.raises(AssertionError):
        check(gold, floor, wrong, "rope/pairwise-vs-rotate_half")


# -------------------------------------------------------------------------------------------------- GQA attention
SEQ_LENS = [11, 6]  # prefill lengths; one decode token follows each
BLOCKS = [[0, 1, 2], [7, 4]]  # physical blocks of 4 slots: non-contiguous, out of order


def _slot(seq: int, pos: int, block_size: int = 4) -> int:
    return BLOCKS[seq][pos // block_size] * block_size + pos % block_size


def _causal(n: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full((n, n), torch.finfo(dtype).min, dtype=dtype).triu(1)[None, None]


def _hf_attention(attn, rotary_emb, xs: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """Each sequence alone through HF attention (explicit additive causal mask); returns the rows of every token."""
    outs = []
    for x in xs:
        h = x.to(dtype)[None]
        pos = torch.arange(x.shape[0])[None]
        out, _ = attn(h, position_embeddings=rotary_emb(h, pos), attention_mask=_causal(x.shape[0], dtype))
        outs.append(out[0])
    return torch.cat(outs)


def _ours_attention(llm, target: str, xs: list[torch.Tensor], dec_shift: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill every sequence's first ``SEQ_LENS[s]`` tokens in one flattened batch through the paged cache, then
    decode each sequence's last token over the cache; returns (prefill rows, decode rows). ``dec_shift`` offsets
    the decode token's RoPE position (a negative control: an off-by-one decode position must fail the gate; a
    shift of *every* position would not, since RoPE scores depend on relative positions only)."""
    attn = llm.model.model.layers[0].self_attn
    n = SEQ_LENS
    width = max(len(b) for b in BLOCKS)
    dev = _dev(target)
    tables = torch.tensor([b + [0] * (width - len(b)) for b in BLOCKS], dtype=torch.int32, device=dev)
    pre_x = torch.cat([x[:m] for x, m in zip(xs, n)]).to(dev, torch.bfloat16)
    pre_pos = torch.cat([torch.arange(m) for m in n]).to(dev)
    pre_slots = torch.tensor([_slot(s, p) for s, m in enumerate(n) for p in range(m)], device=dev)
    dec_x = torch.stack([x[m] for x, m in zip(xs, n)]).to(dev, torch.bfloat16)
    dec_pos = torch.tensor(n, device=dev) + dec_shift
    dec_slots = torch.tensor([_slot(s, m) for s, m in enumerate(n)], device=dev)
    with torch.inference_mode():
        if _rocm(target):
            from modelgen.runtime.layers.attention import AttentionMetadata

            def meta(prefill, slots, q_lens, ctx):
                cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32, device=dev)
                return AttentionMetadata(is_prefill=prefill, slot_mapping=slots, cu_seqlens_q=cu,
                                         context_lens=torch.tensor(ctx, dtype=torch.int32, device=dev),
                                         block_tables=tables, max_seqlen_q=max(q_lens))

            pre = attn(pre_pos, pre_x, meta(True, pre_slots, n, n))
            dec = attn(dec_pos, dec_x, meta(False, dec_slots, [1, 1], [m + 1 for m in n]))
        else:
            cos_sin = llm.model.model.rope_cos_sin

            def meta(slots, max_query_len, seq_ids):
                common = {"block_table_tensor": tables, "slot_mapping": slots, "max_query_len": max_query_len,
                          "block_size": 4, "max_blocks_per_seq": width, "decode_token_threshold": 1,
                          "cached_seq_len": torch.zeros(len(n), 1, dtype=torch.int32), "kv_segment_size": 0,
                          "seq_ids": torch.tensor(seq_ids, dtype=torch.int32)}
                return {attn.layer_name: common}

            seq_ids = [s for s, m in enumerate(n) for _ in range(m)]
            pre = attn(pre_x, pre_pos, cos_sin, meta(pre_slots, len(seq_ids), seq_ids))
            dec = attn(dec_x, dec_pos, cos_sin, meta(dec_slots, 1, list(range(len(n)))))
    return pre.cpu(), dec.cpu()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["llama", "glm4_moe_qknorm"])  # + biases; + QK norm and partial RoPE
def test_gqa_attention_paged_prefill_and_decode(models, name, target):
    hf, hf16, llm = models(name, target)
    xs = [_randn(m + 1, 64, seed=10 + s) for s, m in enumerate(SEQ_LENS)]
    rows = [r for s, m in enumerate(SEQ_LENS) for r in range(sum(k + 1 for k in SEQ_LENS[:s]),
                                                              sum(k + 1 for k in SEQ_LENS[:s]) + m)]
    last = [sum(k + 1 for k in SEQ_LENS[: s + 1]) - 1 for s in range(len(SEQ_LENS))]
    with torch.no_grad():
        gold = _hf_attention(hf.model.layers[0].self_attn, hf.model.rotary_emb, xs, torch.float32)
        floor = _hf_attention(hf16.model.layers[0].self_attn, hf.model.rotary_emb, xs, torch.bfloat16)
    pre, dec = _ours_attention(llm, target, xs)
    # Attention must be peaked for this to test anything (see module docstring): rows differ from a plain average.
    assert gold[rows].std(0).mean() > 0.1
    check(gold[rows], floor[rows], pre, f"attention_prefill/{name}/{target}")
    check(gold[last], floor[last], dec, f"attention_decode/{name}/{target}")
    # Negative control: the decode token rotated one position too far is outside the bound.
    _, dec_bad = _ours_attention(llm, target, xs, dec_shift=1)
    with pytest.raises(AssertionError):
        check(gold[last], floor[last], dec_bad, "attention_decode/position+1")


# ---------------------------------------------------------------------------------------------------------- MLPs
@pytest.mark.parametrize("target", TARGETS)
def test_gated_mlp(models, target):
    hf, hf16, llm = models("llama", target)
    x = _randn(24, 64, seed=20)
    with torch.no_grad(), torch.inference_mode():
        gold = hf.model.layers[1].mlp(x)
        floor = hf16.model.layers[1].mlp(x.bfloat16())
        ours = llm.model.model.layers[1].mlp(x.to(_dev(target), torch.bfloat16))
    check(gold, floor, ours, f"mlp/{target}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, layer", [("qwen3_moe_norm", 0), ("qwen3_moe_nonorm", 1), ("glm4_moe_qknorm", 1)])
def test_moe_block(models, name, layer, target):
    """Router + experts (+ shared experts for GLM4) of one sparse layer: softmax top-k with and without
    renormalisation (Qwen3-MoE), sigmoid grouped top-k with correction bias and routed scaling (GLM4-MoE)."""
    hf, hf16, llm = models(name, target)
    assert hasattr(hf.model.layers[layer].mlp, "experts"), f"{name} layer {layer} is not sparse"
    x = _randn(32, 64, seed=30)
    with torch.no_grad(), torch.inference_mode():
        gold = hf.model.layers[layer].mlp(x[None])[0]
        floor = hf16.model.layers[layer].mlp(x.bfloat16()[None])[0]
        ours = llm.model.model.layers[layer].mlp(x.to(_dev(target), torch.bfloat16))
    check(gold, floor, ours, f"moe/{name}/{target}")
    if name == "qwen3_moe_norm":  # negative control: dropping the top-k renormalisation must fail the gate
        mod = llm.model.model.layers[layer].mlp
        holder = mod.gate if _rocm(target) else mod
        holder.renormalize = False
        try:
            with torch.inference_mode():
                bad = mod(x.to(_dev(target), torch.bfloat16))
        finally:
            holder.renormalize = True
        with pytest.raises(AssertionError):
            check(gold, floor, bad, "moe/no-renormalize")
