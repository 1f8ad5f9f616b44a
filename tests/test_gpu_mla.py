"""MLA decode on the GPU (``runtime/layers/mla/kernels.py``) against the torch reference of
``runtime/layers/mla/ops.py``, and the DeepSeek engine against transformers with the kernel in graphed decode. Skipped
without CUDA.

``TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1`` runs the kernel tests (not the CUDA-graph or engine ones) on the CPU
through Triton's interpreter (float16 there: the interpreter's bfloat16 dot and rounding are not the GPU's).
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu_helpers import DEV, KERNEL_MARKS, LOW, count_calls, cuda_only, rel

pytestmark = KERNEL_MARKS


def _case(B, H, R, DR, block_size, ctx, dtype, seed, width=None):
    """Random absorbed queries, a latent cache whose blocks are handed out in shuffled order, and block tables of
    ``width`` blocks (padding entries point at a NaN-poisoned block: a read past the context would show)."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    need = [-(-c // block_size) for c in ctx]
    width = width or max(need)
    num_blocks = sum(need) + 2
    cache = torch.randn(num_blocks, block_size, R + DR, device=DEV, generator=g).to(dtype)
    poison = num_blocks - 1
    cache[poison] = float("nan")
    perm = torch.randperm(num_blocks - 1, device=DEV, generator=g).tolist()
    tables = torch.full((B, width), poison, dtype=torch.int32, device=DEV)
    for b, n in enumerate(need):
        tables[b, :n] = torch.tensor(perm[:n], dtype=torch.int32, device=DEV)
        perm = perm[n:]
    # the poisoned block must be unreachable: fill the tail of each sequence's last block with NaN too
    for b, c in enumerate(ctx):
        if c % block_size:
            cache[tables[b, c // block_size], c % block_size:] = float("nan")
    q = (torch.randn(B, H, R + DR, device=DEV, generator=g) * 0.5).to(dtype)
    return q, cache, tables, torch.tensor(ctx, dtype=torch.int32, device=DEV)


@pytest.mark.parametrize("H,R,DR", [(16, 64, 16), (20, 32, 8)])
@pytest.mark.parametrize("splits", [None, 1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_mla_decode_matches_reference(H, R, DR, splits, dtype):
    from modelgen.runtime.layers.mla import ops as ref
    from modelgen.runtime.layers.mla import kernels as gm

    ctx = [1, 37, 160, 16]
    q, cache, tables, lens = _case(len(ctx), H, R, DR, 16, ctx, dtype, seed=H + R + (splits or 0))
    got = gm.paged_decode(q, cache, tables, lens, 0.3, R, splits=splits)
    clean = torch.nan_to_num(cache)  # the reference gathers whole blocks (masked after the product)
    want = ref.paged_decode_ref(q.double(), clean.double(), tables.long(), lens.long(), 0.3, R)
    assert got.shape == (len(ctx), H, R) and got.dtype == dtype
    assert rel(got, want) < (1e-5 if dtype == torch.float32 else 1e-2)


def test_mla_decode_dispatch(monkeypatch):
    """``mla/ops.py`` ``paged_decode`` runs the kernel on a GPU tensor, and keeps the reference when DSA selects keys."""
    from modelgen.runtime.layers.mla import ops as ref
    from modelgen.runtime.layers.mla import kernels as gm

    calls = []
    monkeypatch.setattr(gm, "paged_decode", lambda *a, **k: calls.append(1) or torch.zeros(1))
    q, cache, tables, lens = _case(1, 16, 32, 16, 16, [5], torch.float32, seed=0)
    ref.paged_decode(q, torch.nan_to_num(cache), tables, lens, 0.3, 32)
    assert calls == [1]


# ------------------------------------------------------------------------------------------------- CUDA only
@cuda_only
def test_mla_decode_deepseek_v3_shape():
    """V3's per-rank decode shape: 128 heads, r = 512, dr = 64, bf16, contexts across many 16-token blocks."""
    from modelgen.runtime.layers.mla import ops as ref
    from modelgen.runtime.layers.mla import kernels as gm

    ctx = [1, 700, 4096]
    q, cache, tables, lens = _case(len(ctx), 128, 512, 64, 16, ctx, torch.bfloat16, seed=5)
    got = gm.paged_decode(q, cache, tables, lens, 192 ** -0.5, 512)
    want = ref.paged_decode_ref(q.float(), torch.nan_to_num(cache).float(), tables.long(), lens.long(), 192 ** -0.5,
                                512)
    assert rel(got, want) < 1e-2


def _poison_unused(cache, clean, tables, lens):
    """Refill ``cache`` in place from ``clean`` with NaN in every row no sequence's context covers: the slots past
    ``lens[b]`` in a sequence's last block, the blocks its table lists past its context (and the padding block), and
    blocks no table lists. A kernel reading any of them (a NaN row times a masked probability 0 is NaN) fails."""
    bs = cache.shape[1]
    used = torch.zeros(cache.shape[:2], dtype=torch.bool)
    tab = tables.cpu()
    for b, c in enumerate(lens.tolist()):
        pos = torch.arange(c)
        used[tab[b, pos // bs].long(), pos % bs] = True
    cache.copy_(clean.masked_fill(~used.to(cache.device)[..., None], float("nan")))


def _replay_steps(B, width, steps, seed):
    """A decode bucket reused across steps (what a graph replay sees): fixed shapes, per step new context lengths (not
    multiples of the block size, some giving splits no position) and new block tables, the cache's unused rows NaN.
    Every context of ``steps`` fits the ``width`` blocks each sequence holds."""
    q, cache, tables, lens = _case(B, 16, 64, 16, 16, [width * 16] * B, LOW, seed=seed, width=width)
    clean = torch.nan_to_num(cache)
    g = torch.Generator().manual_seed(seed)
    for new in steps:
        owned = tables.flatten()[torch.randperm(B * width, generator=g)].view(B, width)  # same blocks, new slots
        yield q, cache, tables, lens, owned, torch.tensor(new, dtype=torch.int32), clean


def test_mla_decode_reuse_reads_only_the_context():
    """Interpreter-runnable version of the graph replay below: the same buffers reused with new contexts and tables,
    everything outside the contexts NaN; splits=3 over 8 blocks leaves the third split empty for every sequence."""
    from modelgen.runtime.layers.mla import ops as ref
    from modelgen.runtime.layers.mla import kernels as gm

    for splits in (1, 3):
        for q, cache, tables, lens, owned, new, clean in _replay_steps(3, 8, ([41, 4, 91], [90, 1, 17], [0, 128, 33]),
                                                                       seed=9 + splits):
            tables.copy_(owned.to(tables.device))
            lens.copy_(new.to(lens.device))
            _poison_unused(cache, clean, tables, lens)
            q.copy_(torch.randn_like(q.float()).to(q.dtype))
            out = gm.paged_decode(q, cache, tables, lens, 0.3, 64, splits=splits)
            live = (new > 0).to(out.device)  # a context of 0 (a padding row) returns zeros: no key to attend
            assert (out[~live] == 0).all()
            want = ref.paged_decode_ref(q.double(), clean.double(), tables.long(), lens.long(), 0.3, 64)
            assert rel(out[live], want[live]) < 1e-2, (splits, new.tolist())


@cuda_only
def test_mla_decode_replays_from_a_cuda_graph():
    """Captured once; replays read new contexts and tables (no length baked into the graph). The rows a replay's
    contexts cover hold real (finite) values, as the decode step wrote them; every other row is NaN."""
    from modelgen.runtime.layers.mla import ops as ref
    from modelgen.runtime.layers.mla import kernels as gm

    steps = _replay_steps(3, 8, ([40, 3, 90], [41, 4, 91], [90, 1, 17]), seed=9)
    q, cache, tables, lens, owned, new, clean = next(steps)
    tables.copy_(owned.cuda())
    lens.copy_(new.cuda())
    _poison_unused(cache, clean, tables, lens)
    gm.paged_decode(q, cache, tables, lens, 0.3, 64)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gm.paged_decode(q, cache, tables, lens, 0.3, 64)
    for q, cache, tables, lens, owned, new, clean in steps:
        tables.copy_(owned.cuda())
        lens.copy_(new.cuda())
        _poison_unused(cache, clean, tables, lens)
        q.copy_(torch.randn_like(q.float()).to(q.dtype))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want = ref.paged_decode_ref(q.float(), clean.float(), tables.long(), lens.long(), 0.3, 64)
        assert rel(out, want) < 1e-2, new.tolist()


@cuda_only
@pytest.mark.parametrize("name", ["v3", "v3_yarn"])
def test_engine_deepseek_runs_the_kernel_and_matches_transformers(tmp_path, monkeypatch, name):
    """fp32 prefill logits and 16 greedy tokens (graphed decode through the Triton MLA kernel) equal transformers."""
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams
    from modelgen.runtime.layers.mla import kernels as gm
    from tests.deepseek_fixtures import make_deepseek
    from tests.parity_helpers import hf_greedy_forward, hf_logits
    from tests.test_parity_llama import PREFILL_ATOL

    calls = count_calls(monkeypatch, gm, "paged_decode")
    hf = make_deepseek(tmp_path, name)
    prompt = [(7 * i + 3) % 157 + 3 for i in range(40)]
    llm = LLM(tmp_path, target="rocm", dtype="float32", device="cuda", max_model_len=128)
    assert (llm.score(prompt).float().cpu() - hf_logits(hf, prompt)).abs().max().item() < PREFILL_ATOL
    assert llm.generate([prompt], SamplingParams(max_new_tokens=16, ignore_eos=True))[0] == \
        hf_greedy_forward(hf, prompt, 16)
    assert calls["captured"] > 0
