"""Gated DeltaNet on the GPU (``runtime/layers/gated_deltanet/kernels.py`` and fla's chunked prefill) against the torch
references of ``runtime/layers/gated_deltanet/ops.py``, and the Qwen3-Next engine against transformers with those
kernels in prefill and in graphed decode. Skipped without CUDA.

``TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1`` runs the kernel tests (not fla's, not the CUDA-graph or engine ones) on
the CPU through Triton's interpreter. Every check draws fresh random inputs and poisons outputs/untouched pool slots,
so an unwritten element, a wrong slot or a state written for a padding row shows.
"""
from __future__ import annotations

import pytest
import torch

from tests.gpu_helpers import DEV, KERNEL_MARKS, LOW, count_calls, cuda_only, rel

pytestmark = KERNEL_MARKS


def tol(dtype) -> float:
    return 2e-5 if dtype == torch.float32 else 1e-2


def test_gating_matches_reference():
    from modelgen.runtime.layers.gated_deltanet import ops as gd
    from modelgen.runtime.layers.gated_deltanet import kernels as ggd

    for T, H, dtype in ((1, 32, LOW), (37, 8, torch.float32), (5, 48, torch.float16)):
        ba = torch.randn(T, 2 * H, device=DEV).mul(4).to(dtype)  # b, a as views of one projection
        b, a = ba[:, :H], ba[:, H:]
        a[0, 0] = 30.0  # softplus' linear branch (x > 20)
        A_log = torch.randn(H, device=DEV)
        dt_bias = torch.randn(H, device=DEV)
        g, beta = ggd.gdn_gating(A_log, a, dt_bias, b)
        g_ref, beta_ref = gd.gdn_gating_ref(A_log, a, dt_bias, b)
        assert g.dtype == torch.float32 and beta.dtype == dtype
        assert rel(g, g_ref) < 1e-6
        assert (beta.float() - beta_ref.float()).abs().max().item() <= (1e-6 if dtype == torch.float32 else 4e-3)


@pytest.mark.parametrize("dtype,wdtype", [(torch.float32, torch.float32), (LOW, LOW), (LOW, torch.float32)])
def test_gated_rms_norm_matches_reference(dtype, wdtype):
    from modelgen.runtime.layers.gated_deltanet import ops as gd
    from modelgen.runtime.layers.gated_deltanet import kernels as ggd

    x = torch.randn(7, 4, 128, device=DEV).to(dtype)
    z = torch.randn(7, 4, 128, device=DEV).to(dtype)
    w = (1 + 0.3 * torch.randn(128, device=DEV)).to(wdtype)
    got = ggd.gated_rms_norm(x.reshape(-1, 128), z.reshape(-1, 128), w, 1e-6)
    want = gd.gated_rms_norm_ref(x.reshape(-1, 128), z.reshape(-1, 128), w, 1e-6)
    assert got.dtype == want.dtype
    assert rel(got, want) < (1e-6 if dtype == torch.float32 else 8e-3)


def _decode_case(R, S, Hk, Hv, Dk, Dv, K, dtype, seed):
    g_ = torch.Generator(device=DEV).manual_seed(seed)
    C = 2 * Hk * Dk + Hv * Dv
    rnd = lambda *s: torch.randn(*s, device=DEV, generator=g_)  # noqa: E731
    conv_pool = rnd(S, C, K - 1).to(dtype)
    rec_pool = rnd(S, Hv, Dk, Dv) * 0.1
    weight = (rnd(C, K) * 0.5).to(dtype)
    return C, conv_pool, rec_pool, weight, rnd


@pytest.mark.parametrize("Hk,Hv,Dk,Dv", [(2, 4, 16, 16), (2, 4, 128, 128), (1, 1, 32, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_decode_steps_match_reference(Hk, Hv, Dk, Dv, dtype):
    """Three decode steps over a pool: rows with real slots (one fresh), a padding row (slot -1) and a row whose token
    is padding (seq_id -1); outputs and every pool slot equal the static reference's after each step, and slots
    no row names stay bit-for-bit unchanged (NaN-poisoned: a stray read would also poison an output)."""
    from modelgen.runtime.layers.gated_deltanet import ops as gd
    from modelgen.runtime.layers.gated_deltanet import kernels as ggd

    R, S, K = 5, 8, 4
    C, conv_pool, rec_pool, weight, rnd = _decode_case(R, S, Hk, Hv, Dk, Dv, K, dtype, seed=Hk * 100 + Dk)
    untouched = [0, 6]
    conv_pool[untouched] = float("nan")
    rec_pool[untouched] = float("nan")
    slots = torch.tensor([3, 1, -1, 5, 7], device=DEV)
    seq_ids = torch.tensor([0, 1, 2, 3, -1], device=DEV)  # row 4: a padding token in a real slot: no state change
    fresh = torch.tensor([False, True, False, False, False], device=DEV)
    ref_conv, ref_rec = conv_pool.clone(), rec_pool.clone()
    for step in range(3):
        mixed = rnd(R, C).to(dtype)
        g = -torch.rand(R, Hv, device=DEV) * 2
        beta = torch.rand(R, Hv, device=DEV).to(dtype)
        got = ggd.decode(mixed, g, beta, weight, conv_pool, rec_pool, seq_ids, slots, fresh, num_k_heads=Hk,
                         head_k_dim=Dk, head_v_dim=Dv)
        want = gd.gdn_mixer_static_ref(mixed, g, beta, weight, ref_conv, ref_rec, seq_ids, slots, fresh,
                                       num_k_heads=Hk, head_k_dim=Dk, head_v_dim=Dv, decode=True)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert rel(got, want) < tol(dtype), step
        assert (got[2] == 0).all() and (got[4] == 0).all()  # padding rows: zeros
        live = [3, 1, 5]
        assert rel(rec_pool[live], ref_rec[live]) < tol(torch.float32 if dtype == torch.float32 else dtype)
        assert torch.equal(conv_pool[live], ref_conv[live])  # a shift of stored inputs: exact
        assert torch.equal(rec_pool[7], ref_rec[7]) and torch.equal(conv_pool[7], ref_conv[7])  # padding token
        for s in untouched:
            assert torch.isnan(rec_pool[s]).all() and torch.isnan(conv_pool[s].float()).all()
        fresh = torch.zeros_like(fresh)


@pytest.mark.parametrize("Hk,Hv,Dk,Dv", [(2, 4, 16, 16), (2, 4, 128, 128), (1, 1, 32, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
def test_decode_with_gating_is_the_unfused_chain(Hk, Hv, Dk, Dv, dtype):
    """The two-launch decode (gating inside the delta-rule kernel, no seq-id tensor) against the layer's unfused
    chain, three steps: real rows (one fresh), a slot -1 row, two padding tokens past the batch (zeros out), b/a as
    strided views of one projection. Against the torch references (gdn_gating -> gdn_mixer_static(decode)) within
    rounding, and against the unfused kernels (gdn_gating + decode) on a copy of the pools bit for bit (the same
    gate arithmetic and tiles). Pool slots no row names are NaN-poisoned and must stay so."""
    from modelgen.runtime.layers.gated_deltanet import ops as gd
    from modelgen.runtime.layers.gated_deltanet import kernels as ggd

    n, T, S, K = 4, 6, 8, 4
    C, conv_pool, rec_pool, weight, rnd = _decode_case(n, S, Hk, Hv, Dk, Dv, K, dtype, seed=Hv * 10 + Dv)
    untouched = [0, 6]
    conv_pool[untouched] = float("nan")
    rec_pool[untouched] = float("nan")
    slots = torch.tensor([3, 1, -1, 5], device=DEV)
    fresh = torch.tensor([False, True, False, False], device=DEV)
    A_log, dt_bias = rnd(Hv), rnd(Hv)
    ref_conv, ref_rec = conv_pool.clone(), rec_pool.clone()
    k_conv, k_rec = conv_pool.clone(), rec_pool.clone()  # the unfused kernels' pools
    for step in range(3):
        mixed = rnd(T, C).to(dtype)
        ba = (rnd(T, 2 * Hv) * 2).to(dtype)
        b, a = ba[:, :Hv], ba[:, Hv:]
        a[0, 0] = 30.0  # softplus' linear branch
        got = ggd.decode_with_gating(mixed, a, b, A_log, dt_bias, weight, conv_pool, rec_pool, slots, fresh,
                                     num_k_heads=Hk, head_k_dim=Dk, head_v_dim=Dv)
        g, beta = gd.gdn_gating_ref(A_log, a, dt_bias, b)
        want = gd.gdn_mixer_static_ref(mixed[:n], g[:n], beta[:n], weight, ref_conv, ref_rec,
                                       torch.arange(n, device=DEV), slots, fresh, num_k_heads=Hk, head_k_dim=Dk,
                                       head_v_dim=Dv, decode=True)
        kg, kbeta = ggd.gdn_gating(A_log, a, dt_bias, b)
        unfused = ggd.decode(mixed[:n], kg[:n], kbeta[:n], weight, k_conv, k_rec, torch.arange(n, device=DEV), slots,
                             fresh, num_k_heads=Hk, head_k_dim=Dk, head_v_dim=Dv)
        assert got.shape == (T, Hv, Dv) and got.dtype == want.dtype
        assert rel(got[:n], want) < tol(dtype), step
        assert torch.equal(got[:n], unfused), step
        assert (got[2] == 0).all() and (got[n:] == 0).all()  # slot -1 row, padding tokens: zeros
        live = [3, 1, 5]
        assert torch.equal(rec_pool[live], k_rec[live]) and torch.equal(conv_pool[live], k_conv[live])
        assert rel(rec_pool[live], ref_rec[live]) < tol(dtype)
        assert torch.equal(conv_pool[live], ref_conv[live])  # a shift of stored inputs: exact
        assert torch.isnan(rec_pool[untouched]).all() and torch.isnan(conv_pool[untouched].float()).all()
        for s_ in (2, 4, 7):  # named by no row: as they were
            assert torch.equal(rec_pool[s_], ref_rec[s_]) and torch.equal(conv_pool[s_], ref_conv[s_])
        fresh = torch.zeros_like(fresh)


def _window_loop(mixed, a, b, A_log, dt_bias, weight, conv_pool, rec_pool, slots, fresh, lens, q, Hk, Dk, Dv, ref,
                 after=None):
    """The per-column path the layer took before window_decode (``GatedDeltaNet._window_rows``): column j of every
    sequence through the one-token decode, slot -1 where the sequence has <= j real tokens, fresh at j = 0 only --
    with the kernels (``ref=False``: gdn_gating + decode) or the torch references (``ref=True``)."""
    from modelgen.runtime.layers.gated_deltanet import ops as gd
    from modelgen.runtime.layers.gated_deltanet import kernels as ggd

    R = slots.shape[0]
    g, beta = (gd.gdn_gating_ref if ref else ggd.gdn_gating)(A_log, a, dt_bias, b)
    x, gr, br = mixed.view(R, q, -1), g.view(R, q, -1), beta.view(R, q, -1)
    outs = []
    for j in range(q):
        col_slots = torch.where(lens > j, slots, torch.full_like(slots, -1))
        col_fresh = fresh if j == 0 else torch.zeros_like(fresh)
        fn = gd.gdn_mixer_static_ref if ref else gd.gdn_mixer_static
        outs.append(fn(x[:, j].contiguous(), gr[:, j].contiguous(), br[:, j].contiguous(), weight, conv_pool, rec_pool,
                       torch.arange(R, device=DEV), col_slots, col_fresh, num_k_heads=Hk, head_k_dim=Dk,
                       head_v_dim=Dv, decode=True))
        if after is not None:  # the pools after column j
            after.append((conv_pool.clone(), rec_pool.clone()))
    return torch.stack(outs, 1).reshape(R * q, *outs[0].shape[1:])


@pytest.mark.parametrize("Hk,Hv,Dk,Dv", [(2, 4, 16, 16), (2, 4, 128, 128), (1, 1, 32, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, LOW])
@pytest.mark.parametrize("q,K", [(4, 4), (2, 4), (3, 2)])
def test_window_decode_is_the_per_token_loop(Hk, Hv, Dk, Dv, dtype, q, K):
    """The verify window in two launches against the per-column loop it replaces, three windows in a row: sequences
    with a full window, fewer real tokens (1 .. q-1), a fresh one, a padding sequence (slot -1), b/a strided views.
    Bit for bit against the loop of one-token kernels (outputs and both pools, on copies), within rounding against
    the torch references; padding tokens give zeros; NaN-poisoned slots no row names stay so, and a padding
    sequence's slot is untouched. With checkpoints: each real token's conv history and state, bit for bit the
    loop's pools after that column; checkpoint entries of padding tokens and unnamed slots are not written."""
    from modelgen.runtime.layers.gated_deltanet import kernels as ggd

    R, S = 5, 9
    C, conv_pool, rec_pool, weight, rnd = _decode_case(R, S, Hk, Hv, Dk, Dv, K, dtype, seed=Hv * 7 + Dv + q)
    untouched = [0, 6]
    conv_pool[untouched] = float("nan")
    rec_pool[untouched] = float("nan")
    slots = torch.tensor([3, 1, -1, 5, 7], device=DEV)
    fresh = torch.tensor([False, True, False, False, False], device=DEV)
    A_log, dt_bias = rnd(Hv), rnd(Hv)
    k_conv, k_rec = conv_pool.clone(), rec_pool.clone()  # the per-column kernels' pools
    ref_conv, ref_rec = conv_pool.clone(), rec_pool.clone()
    ck = (torch.full((S, q, *conv_pool.shape[1:]), float("nan"), dtype=dtype, device=DEV),
          torch.full((S, q, *rec_pool.shape[1:]), float("nan"), device=DEV))
    for step in range(3):
        lens = torch.tensor([q, max(1, q - 1), q, 1, (step % q) + 1], device=DEV)
        with_ck = step > 0  # the first window without checkpoints (HAS_CK off), then with
        for t in ck:
            t.fill_(float("nan"))
        mixed = rnd(R * q, C).to(dtype)
        ba = (rnd(R * q, 2 * Hv) * 2).to(dtype)
        b, a = ba[:, :Hv], ba[:, Hv:]
        a[0, 0] = 30.0  # softplus' linear branch
        got = ggd.window_decode(mixed, a, b, A_log, dt_bias, weight, conv_pool, rec_pool, slots, fresh, lens, q,
                                num_k_heads=Hk, head_k_dim=Dk, head_v_dim=Dv, checkpoints=ck if with_ck else None)
        after = []
        loop = _window_loop(mixed, a, b, A_log, dt_bias, weight, k_conv, k_rec, slots, fresh, lens, q, Hk, Dk, Dv,
                            ref=False, after=after)
        for r, slot in enumerate(slots.tolist()):
            for j in range(q):
                written = with_ck and slot >= 0 and j < lens[r]
                if written:
                    assert torch.equal(ck[0][slot, j], after[j][0][slot]), (step, r, j)
                    assert torch.equal(ck[1][slot, j], after[j][1][slot]), (step, r, j)
                elif slot >= 0:
                    assert torch.isnan(ck[1][slot, j]).all() and torch.isnan(ck[0][slot, j].float()).all()
        assert torch.isnan(ck[1][untouched + [2, 4, 8]]).all()
        want = _window_loop(mixed, a, b, A_log, dt_bias, weight, ref_conv, ref_rec, slots, fresh, lens, q, Hk, Dk, Dv,
                            ref=True)
        assert got.shape == (R * q, Hv, Dv) and got.dtype == dtype
        assert torch.equal(got, loop), step
        assert rel(got, want) < tol(dtype), step
        real = (torch.arange(q, device=DEV).view(1, q) < lens.view(R, 1)) & (slots >= 0).view(R, 1)
        assert (got[~real.reshape(-1)] == 0).all()  # padding tokens and the padding sequence: zeros
        live = [3, 1, 5, 7]
        assert torch.equal(rec_pool[live], k_rec[live]) and torch.equal(conv_pool[live], k_conv[live]), step
        assert rel(rec_pool[live], ref_rec[live]) < tol(dtype)
        assert torch.equal(conv_pool[live], ref_conv[live])  # shifts of stored inputs: exact
        assert torch.isnan(rec_pool[untouched]).all() and torch.isnan(conv_pool[untouched].float()).all()
        for s_ in (2, 4, 8):  # named by no sequence: as they were
            assert torch.equal(rec_pool[s_], ref_rec[s_]) and torch.equal(conv_pool[s_], ref_conv[s_])
        fresh = torch.zeros_like(fresh)


def test_mixer_static_dispatches_to_the_kernels(monkeypatch):
    """``gdn_mixer_static(decode=True)`` on a GPU tensor runs the Triton decode (the layer's graphed path)."""
    from modelgen.runtime.layers.gated_deltanet import ops as gd
    from modelgen.runtime.layers.gated_deltanet import kernels as ggd

    calls = []
    monkeypatch.setattr(ggd, "decode", lambda *a, **k: calls.append(1) or torch.zeros(1))
    C, conv_pool, rec_pool, weight, rnd = _decode_case(2, 2, 1, 2, 16, 16, 4, torch.float32, seed=1)
    gd.gdn_mixer_static(rnd(2, C), torch.zeros(2, 2, device=DEV), torch.zeros(2, 2, device=DEV), weight, conv_pool,
                        rec_pool, torch.arange(2, device=DEV), torch.arange(2, device=DEV),
                        torch.zeros(2, dtype=torch.bool, device=DEV), num_k_heads=1, head_k_dim=16, head_v_dim=16,
                        decode=True)
    assert calls == [1]


# ------------------------------------------------------------------------------------------------- CUDA only
@cuda_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lens", [[200], [1, 64, 130, 7]])
def test_fla_chunk_prefill_matches_reference(dtype, lens, monkeypatch):
    """fla's chunked kernel (through the dispatching ``chunk_gated_delta_rule``, opted in) equals the torch chunked
    reference: grouped value heads, a non-zero initial state, varlen sequences crossing the 64-token chunk boundary."""
    from modelgen.runtime.layers.gated_deltanet import ops as gd
    from modelgen.runtime.layers.gated_deltanet import kernels as ggd

    if ggd.fla_chunk() is None:
        pytest.skip("flash-linear-attention (fla-core) not installed")
    monkeypatch.setenv("MODELGEN_GDN_PREFILL", "fla")
    called = []
    monkeypatch.setattr(ggd, "chunk_prefill", lambda *a, _f=ggd.chunk_prefill: called.append(1) or _f(*a))
    Hk, Hv, Dk, Dv = 2, 4, 128, 128
    T = sum(lens)
    q = torch.randn(1, T, Hk, Dk, device="cuda").to(dtype)
    k = torch.randn(1, T, Hk, Dk, device="cuda").to(dtype)
    v = torch.randn(1, T, Hv, Dv, device="cuda").to(dtype)
    g = -torch.rand(1, T, Hv, device="cuda") * 0.5
    beta = torch.rand(1, T, Hv, device="cuda").to(dtype)
    h0 = torch.randn(len(lens), Hv, Dk, Dv, device="cuda") * 0.1
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    cu_arg = None if len(lens) == 1 else cu
    got, got_state = gd.chunk_gated_delta_rule(q, k, v, g, beta, h0, cu_seqlens=cu_arg)
    want, want_state = gd.chunk_gated_delta_rule_ref(q.double(), k.double(), v.double(), g.double(), beta.double(),
                                                     h0.double(), cu_seqlens=cu_arg)
    # fla computes its dots in tf32/bf16 on the tensor cores: bf16-level agreement whatever the input dtype
    assert called and got.dtype == dtype and rel(got, want) < 1e-2
    assert got_state.dtype == torch.float32 and rel(got_state, want_state) < 1e-2


@cuda_only
def test_decode_replays_from_a_cuda_graph():
    """Captured once, replayed on new inputs and new slots: the replay reads the slot tensors, not captured values."""
    from modelgen.runtime.layers.gated_deltanet import ops as gd

    Hk, Hv, Dk, Dv, K, R, S = 2, 4, 128, 128, 4, 4, 6
    dtype = torch.bfloat16
    C, conv_pool, rec_pool, weight, rnd = _decode_case(R, S, Hk, Hv, Dk, Dv, K, dtype, seed=7)
    mixed, g, beta = rnd(R, C).to(dtype), -torch.rand(R, Hv, device="cuda"), torch.rand(R, Hv, device="cuda").to(dtype)
    slots = torch.tensor([0, 2, 4, -1], device="cuda")
    seq_ids = torch.arange(R, device="cuda")
    fresh = torch.zeros(R, dtype=torch.bool, device="cuda")
    kw = dict(num_k_heads=Hk, head_k_dim=Dk, head_v_dim=Dv, decode=True)
    gd.gdn_mixer_static(mixed, g, beta, weight, conv_pool.clone(), rec_pool.clone(), seq_ids, slots, fresh, **kw)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gd.gdn_mixer_static(mixed, g, beta, weight, conv_pool, rec_pool, seq_ids, slots, fresh, **kw)
    for new_slots in ([1, 3, 5, -1], [5, -1, 0, 2]):
        mixed.copy_(rnd(R, C).to(dtype))
        g.copy_(-torch.rand(R, Hv, device="cuda"))
        slots.copy_(torch.tensor(new_slots, device="cuda"))
        ref_conv, ref_rec = conv_pool.clone(), rec_pool.clone()
        want = gd.gdn_mixer_static_ref(mixed, g, beta, weight, ref_conv, ref_rec, seq_ids, slots, fresh, **kw)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel(out, want) < 1e-2
        assert rel(rec_pool, ref_rec) < 1e-2 and torch.equal(conv_pool, ref_conv)


def _hf_torch_paths(monkeypatch):
    """The HF oracle runs on the CPU: with fla installed, transformers binds its GDN functions to fla's Triton kernels
    at import (``use_kernel_func_from_hub_with_fallback``), which cannot run on CPU tensors. Put the torch ones back
    (the decorated functions keep them as ``__wrapped__``)."""
    import importlib

    for mod_name in ("qwen3_next", "qwen3_5", "qwen3_5_moe"):
        try:
            mod = importlib.import_module(f"transformers.models.{mod_name}.modeling_{mod_name}")
        except ImportError:
            continue
        for name in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn",
                     "causal_conv1d_update"):
            fn = getattr(mod, name, None)
            while fn is not None and hasattr(fn, "__wrapped__"):
                fn = fn.__wrapped__
            if fn is not None:
                monkeypatch.setattr(mod, name, fn)


PROMPT = list(range(3, 150, 2))  # 74 tokens: prefill crosses the 64-token chunk boundary


@cuda_only
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("name", ["qwen3_next", "qwen3_5"])
def test_engine_gdn_runs_the_kernels_and_matches_transformers(tmp_path, monkeypatch, name, fused):
    """fp32 prefill logits and 16 greedy tokens (graphed decode) equal transformers, with the Triton GDN decode inside
    the captured graphs; a batch of mixed-length prompts decodes as each prompt alone. Both decode paths: the
    two-launch ``decode_with_gating`` (``FUSED_DECODE``) and the unfused chain around ``decode``."""
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams
    from modelgen.runtime.layers.gated_deltanet import kernels as ggd
    from tests.parity_helpers import hf_greedy_forward, hf_logits
    from tests.qwen3_next_fixtures import make_qwen3_next
    from tests.test_parity_llama import PREFILL_ATOL

    monkeypatch.setattr(ggd, "FUSED_DECODE", fused)
    calls = count_calls(monkeypatch, ggd, "decode_with_gating" if fused else "decode")
    _hf_torch_paths(monkeypatch)
    hf = make_qwen3_next(tmp_path, name)
    llm = LLM(tmp_path, target="rocm", dtype="float32", device="cuda", max_model_len=256, max_num_seqs=4)
    assert llm.backend == "triton"
    assert (llm.score(PROMPT).float().cpu() - hf_logits(hf, PROMPT)).abs().max().item() < PREFILL_ATOL
    params = SamplingParams(max_new_tokens=16, ignore_eos=True)
    assert llm.generate([PROMPT], params)[0] == hf_greedy_forward(hf, PROMPT, 16)
    assert calls["captured"] > 0
    prompts = [PROMPT, [1, 5, 9, 33], list(range(7, 100)), [1, 99]]
    batch = llm.generate(prompts, SamplingParams(max_new_tokens=8, ignore_eos=True))
    assert batch == [llm.generate([p], SamplingParams(max_new_tokens=8, ignore_eos=True))[0] for p in prompts]
