"""Sliding-window attention and attention sinks in the paged torch references (runtime/layers/attention/ops.py), against
transformers' eager formula, and in the engine: chunked prefill and decode far past the window give one-shot's and
HF's results on both targets (GPT-OSS fixtures: window 8, 40-token prompt, block size 4 so windows cross blocks)."""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.work import Work
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.layers.attention import ops
from tests.gpt_oss_fixtures import PROMPT, make_gpt_oss
from tests.test_parity_llama import hf_greedy, hf_logits

H, KVH, D, BS = 4, 2, 8, 4  # heads, kv heads, head dim, block size


def hf_eager(q, k, v, qpos, kpos, window, sinks, scale):
    """transformers' GPT-OSS eager attention for one sequence: ``q [n, H, D]``, ``k, v [L, KVH, D]``; the sliding
    mask of masking_utils (``kv > q - window``) over the causal one, then the sink column concatenated, softmaxed
    (after subtracting the row max, as HF does) and dropped."""
    rep = H // KVH
    kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    logits = torch.einsum("qhd,khd->hqk", q, kk) * scale
    visible = kpos[None, :] <= qpos[:, None]
    if window is not None:
        visible &= kpos[None, :] > qpos[:, None] - window
    logits = logits.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        logits = torch.cat([logits, sinks.view(H, 1, 1).expand(H, len(qpos), 1)], dim=-1)
    logits = logits - logits.max(dim=-1, keepdim=True).values
    probs = torch.softmax(logits, dim=-1)[..., : len(kpos)]
    return torch.einsum("hqk,khd->qhd", probs, vv)


def paged(length: int, seed: int = 0):
    """K/V of one sequence of ``length`` tokens scattered over shuffled cache blocks."""
    g = torch.Generator().manual_seed(seed)
    nblocks = (length + BS - 1) // BS
    table = torch.randperm(nblocks + 3, generator=g)[:nblocks].to(torch.int32)
    k, v = torch.randn(length, KVH, D, generator=g), torch.randn(length, KVH, D, generator=g)
    k_cache, v_cache = torch.zeros(nblocks + 3, KVH, BS, D), torch.zeros(nblocks + 3, KVH, BS, D)
    slots = (table.long()[torch.arange(length) // BS] * BS + torch.arange(length) % BS)
    ops.write_paged_kv(k, v, k_cache, v_cache, slots)
    return k, v, k_cache, v_cache, table


CONFIGS = [(None, False), (6, False), (None, True), (6, True), (1, True), (64, True)]
IDS = [f"window{w}-{'sinks' if s else 'nosinks'}" for w, s in CONFIGS]


@pytest.mark.parametrize("window, with_sinks", CONFIGS, ids=IDS)
def test_paged_references_match_hf_eager(window, with_sinks):
    L, n = 19, 7  # the last 7 tokens are the query chunk (chunked prefill over 12 cached tokens)
    k, v, k_cache, v_cache, table = paged(L)
    q = torch.randn(L, H, D, generator=torch.Generator().manual_seed(1))
    sinks = torch.randn(H, generator=torch.Generator().manual_seed(2)) * 2 if with_sinks else None
    scale = D ** -0.5
    pos = torch.arange(L)
    want = hf_eager(q, k, v, pos, pos, window, sinks, scale)
    assert_every_path(want, q, k, v, n, dict(sliding_window=window, sinks=sinks))


def assert_every_path(want, q, k, v, n: int, opts: dict) -> None:
    """The four torch references with the layer options ``opts`` give ``want`` (the eager result of every position of
    one sequence): varlen prefill of the last ``n`` tokens over the paged cache, decode of the last token, neuron's
    packed prefill of the whole sequence plus a padding token, and its segmented prefill of the last ``n``."""
    L = q.shape[0]
    _, _, k_cache, v_cache, table = paged(L)  # same seed: the same K/V as ``k, v``
    scale = D ** -0.5
    pos = torch.arange(L)
    got = ops.paged_prefill_attention(q[L - n:], k_cache, v_cache, torch.tensor([0, n], dtype=torch.int32),
                                      torch.tensor([L], dtype=torch.int32), table[None], scale, **opts)
    torch.testing.assert_close(got, want[L - n:], atol=1e-5, rtol=1e-5)
    got = ops.paged_decode_attention(q[L - 1:], k_cache, v_cache, table[None], torch.tensor([L], dtype=torch.int32),
                                     scale, **opts)
    torch.testing.assert_close(got, want[L - 1:], atol=1e-5, rtol=1e-5)
    seq_ids = torch.cat([torch.zeros(L, dtype=torch.long), torch.tensor([-1])])
    positions = torch.cat([pos, torch.tensor([0])])
    pad = torch.zeros(1, KVH, D)
    got = ops.packed_prefill_attention(torch.cat([q, torch.zeros(1, H, D)]), torch.cat([k, pad]), torch.cat([v, pad]),
                                       seq_ids, positions, scale, **opts)
    torch.testing.assert_close(got[:L], want, atol=1e-5, rtol=1e-5)
    got = ops.paged_segment_attention(q[L - n:], k_cache, v_cache, table[None].long(),
                                      torch.zeros(n, dtype=torch.long), pos[L - n:], scale, **opts)
    torch.testing.assert_close(got, want[L - n:], atol=1e-5, rtol=1e-5)


def test_window_and_sinks_change_the_result():
    """The reference above is not vacuous: a window narrower than the context and a sink each change the output."""
    L = 19
    k, v, k_cache, v_cache, table = paged(L)
    q = torch.randn(1, H, D)
    args = (q, k_cache, v_cache, table[None], torch.tensor([L], dtype=torch.int32), D ** -0.5)
    full = ops.paged_decode_attention(*args)
    assert (ops.paged_decode_attention(*args, sliding_window=6) - full).abs().max() > 1e-2
    assert (ops.paged_decode_attention(*args, sinks=torch.full((H,), 3.0)) - full).abs().max() > 1e-2
    # a window at least as long as the context is full attention
    torch.testing.assert_close(ops.paged_decode_attention(*args, sliding_window=L), full)


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpt_oss_window")
    return d, make_gpt_oss(d)


def chunked_score(llm: LLM, prompt: list[int], chunk: int) -> torch.Tensor:
    """Teacher-forced logits of every position, the prompt fed in chunks over the paged cache (each chunk attends to
    the cached earlier chunks), as the engine's chunked prefill runs it."""
    seq_id = 10_000
    llm.blocks.ensure(seq_id, len(prompt))
    try:
        return torch.cat([llm.runner.step([Work(seq_id, prompt[s:s + chunk], s)], all_positions=True)
                          for s in range(0, len(prompt), chunk)])
    finally:
        llm.blocks.release(seq_id)


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_chunked_prefill_and_decode_past_the_window(gpt_oss, target):
    """Prompt chunks of 16 tokens over 4-token blocks (each chunk's window reaches into the previous chunk's blocks),
    then 24 decode steps (the window slides across 6 more blocks): equal to one-shot prefill and to HF."""
    path, hf = gpt_oss
    kw = dict(target=target, dtype="float32", max_model_len=128, block_size=4)
    one_shot = LLM(path, **kw)
    chunked = LLM(path, max_num_batched_tokens=16, **kw)
    assert chunked.chunked_prefill and chunked.max_num_batched_tokens == 16
    ref = hf_logits(hf, PROMPT)
    err = (one_shot.score(PROMPT).float() - ref).abs().max().item()
    assert err < 1e-4, f"{target}: one-shot prefill logits differ from HF by {err}"
    err = (chunked_score(chunked, PROMPT, 16).float() - ref).abs().max().item()
    assert err < 1e-4, f"{target}: chunked prefill logits (chunks of 16) differ from HF by {err}"
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    want = hf_greedy(hf, PROMPT, 24)
    assert one_shot.generate([PROMPT], params)[0] == want
    assert chunked.generate([PROMPT], params)[0] == want
    # a batch mixing a prompt shorter than the window with the long one (per-sequence windows in one step)
    short = PROMPT[:5]
    got = chunked.generate([short, PROMPT], SamplingParams(max_new_tokens=12, ignore_eos=True))
    assert got == [hf_greedy(hf, short, 12), want[:12]]


def test_gpu_dispatch_windows_and_sinks_reach_the_kernel(gpt_oss, monkeypatch):
    """On the GPU path every GPT-OSS attention layer (sliding and full, all with sinks) dispatches to the Triton
    attention entry point with its own window and sinks (runtime/layers/attention/kernels.py implements both), and the
    biased router takes the fused routing kernel (the experts' biases and clamped SwiGLU run the Triton MoE kernels:
    tests/test_gpu_moe_bias.py). The "kernel" here records its arguments and computes the torch reference, so the
    logits are still checked against transformers."""
    from modelgen.runtime.layers.attention import layer as attn_layer
    from modelgen.runtime.layers.attention import ops
    from modelgen.runtime.layers.moe import layer as moe_layer

    path, hf = gpt_oss
    llm = LLM(path, target="rocm", dtype="float32", max_model_len=128)
    seen: dict[str, tuple] = {}

    def kernel(self, q, k, v, meta, rotary, positions, sinks=None, *_, **__):  # softcap / qk_norm: none here
        seen[self.layer_name] = (self.sliding_window, sinks is not None)
        if rotary is not None:
            q, k = rotary(positions, q, k)
        ops.write_paged_kv(k, v, self.k_cache, self.v_cache, meta.slot_mapping)
        attend = ops.paged_prefill_attention if meta.is_prefill else ops.paged_decode_attention
        args = ((q, self.k_cache, self.v_cache, meta.cu_seqlens_q, meta.context_lens, meta.block_tables)
                if meta.is_prefill else (q, self.k_cache, self.v_cache, meta.block_tables, meta.context_lens))
        o = attend(*args, self.scale, sliding_window=self.sliding_window, sinks=sinks)
        return o.reshape(o.shape[0], self.num_heads * self.head_dim)

    import types

    # Only the attention layer module sees a GPU (norms, RoPE, MoE keep their real dispatch on this CPU-only machine).
    monkeypatch.setattr(attn_layer, "gpu", types.SimpleNamespace(enabled=lambda x: True))
    monkeypatch.setattr(attn_layer.PagedAttention, "_forward_gpu", kernel)
    err = (llm.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < 1e-4
    windows = {name: w for name, (w, _) in seen.items()}
    assert len(seen) == hf.config.num_hidden_layers and all(has_sinks for _, has_sinks in seen.values())
    expected = [hf.config.sliding_window if t == "sliding_attention" else None for t in hf.config.layer_types]
    assert [windows[n] for n in sorted(windows, key=lambda n: int(n.split(".")[1]))] == expected
    monkeypatch.setattr(moe_layer, "gpu", types.SimpleNamespace(enabled=lambda x: True))
    router = llm.model.model.layers[0].mlp.router
    # The biased top-k-then-softmax router runs the fused routing kernel on the GPU (issue 29: 1.066x at bs1).
    assert router._gpu(torch.zeros(1, 64))


@pytest.mark.parametrize("target", ["rocm", "neuron"])
@pytest.mark.parametrize("bad", [0, -4])
def test_bad_window_is_one_line_error(tmp_path, target, bad):
    import json

    make_gpt_oss(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["sliding_window"] = bad
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=f"layers.0.self_attn: sliding_window must be a positive number of tokens or "
                                         f"null, got {bad}"):
        LLM(tmp_path, target=target, dtype="float32", max_model_len=64)


def test_prefill_skips_blocks_wholly_outside_the_window():
    """Chunked prefill of a sliding layer never reads the blocks before its first visible key: poisoning them with
    NaN leaves the result finite and equal (a masked NaN key would still turn SDPA's row into NaN)."""
    L, n, window = 19, 7, 6  # first visible key 19 - 7 - 6 + 1 = 7: block 1 on (block size 4), block 0 unread
    k, v, k_cache, v_cache, table = paged(L)
    q = torch.randn(n, H, D, generator=torch.Generator().manual_seed(3))
    args = (torch.tensor([0, n], dtype=torch.int32), torch.tensor([L], dtype=torch.int32), table[None], D ** -0.5)
    want = ops.paged_prefill_attention(q, k_cache, v_cache, *args, sliding_window=window)
    k_cache[table[0]], v_cache[table[0]] = float("nan"), float("nan")
    got = ops.paged_prefill_attention(q, k_cache, v_cache, *args, sliding_window=window)
    torch.testing.assert_close(got, want)
    assert ops.paged_prefill_attention(q, k_cache, v_cache, *args).isnan().any()  # full attention reads block 0


# ------------------------------------------------------------------- chunked attention (Llama 4) and ALiBi (Falcon)
def hf_eager_chunk_alibi(q, k, v, chunk, alibi, scale):
    """Eager attention of one sequence with transformers' chunked mask (``masking_utils.chunked_overlay``: kv // C ==
    q // C, on the causal one) and Falcon's ALiBi: ``build_alibi_tensor(...) / sqrt(head_dim)`` added to the scaled
    scores (FalconModel folds it into the SDPA mask)."""
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    L = q.shape[0]
    pos = torch.arange(L)
    kk, vv = k.repeat_interleave(H // KVH, dim=1), v.repeat_interleave(H // KVH, dim=1)
    logits = torch.einsum("qhd,khd->hqk", q, kk) * scale
    if alibi:
        logits = logits + build_alibi_tensor(torch.ones(1, L, dtype=torch.long), H, torch.float32) / D ** 0.5
    visible = pos[None, :] <= pos[:, None]
    if chunk is not None:
        visible &= pos[None, :] // chunk == pos[:, None] // chunk
    probs = torch.softmax(logits.masked_fill(~visible, float("-inf")), dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, vv)


@pytest.mark.parametrize("chunk, alibi", [(5, False), (4, False), (1, False), (None, True), (6, True)])
def test_chunk_and_alibi_references_match_hf_eager(chunk, alibi):
    L, n = 19, 7  # the last 7 tokens (positions 12..18) straddle chunks
    k, v, _, _, _ = paged(L)
    q = torch.randn(L, H, D, generator=torch.Generator().manual_seed(1))
    want = hf_eager_chunk_alibi(q, k, v, chunk, alibi, D ** -0.5)
    bias = ops.Alibi(ops.alibi_slopes(H), D ** -0.5, bf16=True) if alibi else None
    assert_every_path(want, q, k, v, n, dict(chunk=chunk, alibi=bias))
    # not vacuous: without the chunk / the bias the result differs
    off = hf_eager_chunk_alibi(q, k, v, None, False, D ** -0.5)
    assert (off - want).abs().max() > 1e-2


@pytest.mark.parametrize("heads", list(range(1, 41)) + [64, 71, 128])
def test_alibi_slopes_equal_transformers(heads):
    """The slopes for any head count (the odd powers past the largest power of two) are transformers' own."""
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    hf = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), heads, torch.float32)[:, 0, 1]  # slope * position 1
    torch.testing.assert_close(ops.alibi_slopes(heads).bfloat16().float(), hf, rtol=0, atol=0)


def test_prefill_skips_blocks_before_the_chunk():
    """Chunked prefill of a chunked layer never reads the blocks before its first query's chunk (NaN there changes
    nothing), while a chunk starting in block 0 reads it."""
    L, n, chunk = 19, 7, 8  # first query at 12: its chunk starts at 8 = block 2 (block size 4); blocks 0, 1 unread
    k, v, k_cache, v_cache, table = paged(L)
    q = torch.randn(n, H, D, generator=torch.Generator().manual_seed(3))
    args = (torch.tensor([0, n], dtype=torch.int32), torch.tensor([L], dtype=torch.int32), table[None], D ** -0.5)
    want = ops.paged_prefill_attention(q, k_cache, v_cache, *args, chunk=chunk)
    for b in table[:2]:
        k_cache[b], v_cache[b] = float("nan"), float("nan")
    torch.testing.assert_close(ops.paged_prefill_attention(q, k_cache, v_cache, *args, chunk=chunk), want)
    assert ops.paged_prefill_attention(q, k_cache, v_cache, *args, chunk=16).isnan().any()


def test_torch_only_layers_are_named_and_run_multi_token_steps_eagerly():
    """A chunked or ALiBi layer names why it takes the torch path on a GPU and takes no captured multi-token step
    (the torch prefill reference reads sequence lengths on the host); a plain layer keeps every layout."""
    from modelgen.runtime.layers.attention import PagedAttention
    from modelgen.runtime.layers.attention.layer import TORCH_ONLY
    from modelgen.runtime.layers.kind import STEP_LAYOUTS

    plain = PagedAttention(H, KVH, D, 0.25, "layers.0.self_attn")
    chunked = PagedAttention(H, KVH, D, 0.25, "layers.0.self_attn", chunk=8)
    alibi = PagedAttention(H, KVH, D, 0.25, "layers.0.self_attn", alibi_slopes=ops.alibi_slopes(H))
    assert plain.torch_only is None and plain.step_graph_layouts(3) == frozenset({"varlen"})
    assert (chunked.torch_only, alibi.torch_only) == (TORCH_ONLY["chunk"], TORCH_ONLY["alibi"])
    for layer in (chunked, alibi):
        assert layer.step_graph_layouts(1) == STEP_LAYOUTS and layer.step_graph_layouts(3) == frozenset()


@pytest.mark.parametrize("bad", [0, -8, 2.5, True])
def test_bad_chunk_is_one_line_error(bad):
    from modelgen.runtime.layers.attention import PagedAttention

    with pytest.raises(ValueError, match=f"layers.0.self_attn: attention_chunk_size must be a positive number of "
                                         f"tokens or null, got {bad!r}"):
        PagedAttention(H, KVH, D, 0.25, "layers.0.self_attn", chunk=bad)
