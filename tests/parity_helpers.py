"""Shared pieces of the hybrid/MLA parity tests (imported as tests.parity_helpers)."""
from __future__ import annotations

import torch

from modelgen.runtime.engine.llm import LLM


def hf_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def hf_greedy_forward(model, ids: list[int], n: int) -> list[int]:
    """Greedy continuation by repeated full forwards (teacher-forced, no HF cache): the reference for models whose
    ``generate()`` may differ from their own forward (Qwen3.5, facts.md)."""
    ids = list(ids)
    out = []
    for _ in range(n):
        tok = int(hf_logits(model, ids)[-1].argmax())
        out.append(tok)
        ids.append(tok)
    return out


def llm(path, target, **kw) -> LLM:
    kw.setdefault("dtype", "float32")
    kw.setdefault("max_model_len", 256)
    return LLM(path, target=target, **kw)


def checkpoint_cache(tmp_path_factory, make):
    """``get(name, fused=False) -> (dir, hf_model)``, each tiny checkpoint written once per module."""
    cache: dict = {}

    def get(name: str, fused: bool = False):
        if (name, fused) not in cache:
            d = tmp_path_factory.mktemp(f"{name}_{'fused' if fused else 'per_expert'}")
            cache[name, fused] = (d, make(d, name, fused))
        return cache[name, fused]

    return get


def assert_fp32_parity(model: LLM, hf, prompt: list[int], atol: float, name: str, tokens: int = 16) -> None:
    """fp32 prefill logits within ``atol`` of transformers' and ``tokens`` greedy tokens equal (teacher-forced)."""
    err = (model.score(prompt).float() - hf_logits(hf, prompt)).abs().max().item()
    assert err < atol, f"{name}: prefill logits differ by {err}"
    out = model.generate_ids([prompt], _greedy(tokens))[0]
    assert out == hf_greedy_forward(hf, prompt, tokens), f"{name}: greedy tokens differ"


def assert_tp2_matches_tp1(path, target: str, prompt: list[int], tmp_path) -> None:
    """Two gloo ranks (tests/tp_worker.py) give TP=1's fp32 logits and 8 greedy tokens on every rank."""
    import json

    import torch.multiprocessing as mp
    from safetensors.torch import load_file

    from tests.tp_worker import run_rank

    single = llm(path, target, max_model_len=64)
    want = single.score(prompt)
    want_tokens = single.generate_ids([prompt], _greedy(8))[0]
    out = str(tmp_path / "result")
    mp.spawn(run_rank, args=(2, str(tmp_path / "init"), str(path), target, prompt, out), nprocs=2)
    for rank in range(2):
        torch.testing.assert_close(load_file(f"{out}.rank{rank}.safetensors")["logits"], want, atol=1e-4, rtol=1e-4)
        with open(f"{out}.rank{rank}.json") as f:
            assert json.load(f)["tokens"] == want_tokens, f"rank {rank}: greedy tokens differ"


def assert_tp2_matches_tp1_on(path, targets: list[str], prompt: list[int], tmp_path, max_model_len: int = 256,
                              kv_heads: int | None = None) -> None:
    """:func:`assert_tp2_matches_tp1` for each of ``targets``, all in one spawn of two gloo ranks
    (tests/tp_worker.py ``run_rank_targets``): a spawn per target would import torch and modelgen again.
    ``kv_heads``: also the KV heads each rank's first cache layer holds."""
    import json

    import torch.multiprocessing as mp
    from safetensors.torch import load_file

    from tests.tp_worker import run_rank_targets

    want = {}
    for target in targets:
        single = llm(path, target, max_model_len=max_model_len)
        want[target] = single.score(prompt), single.generate_ids([prompt], _greedy(8))[0]
    out = str(tmp_path / "result")
    mp.spawn(run_rank_targets, args=(2, str(tmp_path / "init"), str(path), list(targets), prompt, out, max_model_len),
             nprocs=2)
    for target, (logits, tokens) in want.items():
        for rank in range(2):
            got = load_file(f"{out}.{target}.rank{rank}.safetensors")["logits"]
            torch.testing.assert_close(got, logits, atol=1e-4, rtol=1e-4, msg=lambda m: f"{target} rank {rank}: {m}")
            with open(f"{out}.{target}.rank{rank}.json") as f:
                meta = json.load(f)
            assert meta["tokens"] == tokens, f"{target} rank {rank}: greedy tokens differ"
            assert kv_heads is None or meta["kv_heads"] == kv_heads, f"{target} rank {rank}: {meta['kv_heads']} KV"


def assert_neuron_buckets_compile(path, prompt: list[int]) -> None:
    """The neuron target's forward compiled with ``torch.compile(fullgraph=True)`` per bucket (prefill 128; decode 1
    and 2 rows x 128 context): warmup traces every bucket in one graph each (a graph break raises there, a recompile
    afterwards raises too) and the compiled engine gives the eager engine's tokens for two prompts of other lengths."""
    torch._dynamo.reset()
    buckets = dict(prefill_buckets=[128], decode_buckets=[1, 2], decode_context_buckets=[128], max_model_len=128,
                   max_num_seqs=2, block_size=16)
    prompts = [prompt, prompt[:9]]
    want = llm(path, "neuron", **buckets).generate_ids(prompts, _greedy(5))
    compiled = llm(path, "neuron", compile=True, **buckets)
    compiled.warmup()
    assert compiled.runner.compiled and all(row["graphs"] == 1 for row in compiled.runner.bucket_table)
    assert compiled.generate_ids(prompts, _greedy(5)) == want


def _greedy(n: int):
    from modelgen.runtime.engine.sampler import SamplingParams

    return SamplingParams(max_tokens=n, ignore_eos=True)


def assert_tp2_experts_match_1(path, target: str, prompt: list[int], expert_parallel_size: int) -> None:
    """TP=2 started by LLM with experts split by whole experts (``expert_parallel_size`` 2) or every expert
    TP-sharded (1): fp32 logits and 8 greedy tokens equal TP=1's."""
    single = llm(path, target, max_model_len=64)
    want, want_tokens = single.score(prompt), single.generate_ids([prompt], _greedy(8))[0]
    model = llm(path, target, max_model_len=64, tensor_parallel_size=2, expert_parallel_size=expert_parallel_size)
    try:
        torch.testing.assert_close(model.score(prompt), want, atol=1e-4, rtol=1e-4)
        assert model.generate_ids([prompt], _greedy(8))[0] == want_tokens
    finally:
        model.close()


def assert_bf16_three_way(path, target: str, hf, prompt: list[int], name: str) -> None:
    """modelgen in bf16 within the three-way bound of transformers' fp32 (gold) and bf16 (floor) logits."""
    import copy

    from modelgen.runtime.testing import assert_close_three_way
    from tests.test_parity_llama import THREE_WAY_ATOL, THREE_WAY_FACTOR

    gold = hf_logits(hf, prompt)
    floor = hf_logits(copy.deepcopy(hf).to(torch.bfloat16), prompt)
    ours = llm(path, target, dtype="bfloat16", max_model_len=128).score(prompt).float()
    assert_close_three_way(gold, floor, ours, factor=THREE_WAY_FACTOR, atol=THREE_WAY_ATOL, name=name)


# ------------------------------------------------------------------ per-request state (recurrent layer kinds) checks
def assert_interleaved_equal_solo(path, target, prompts: list[list[int]], max_tokens: int = 8) -> None:
    """Different lengths in one continuous batch (short ones decode beside longer prefills) give each request the
    tokens it gets alone: no per-request state leaks between sequences."""
    from modelgen.runtime.engine.sampler import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    together = llm(path, target, max_num_seqs=len(prompts)).generate_ids(prompts, params)
    assert together == [llm(path, target).generate_ids([p], params)[0] for p in prompts]


def assert_preemption_restarts_fresh(path, prompts: list[list[int]], max_tokens: int = 12) -> None:
    """A KV cache too small for both requests forces preemption; the victim restarts from zeroed states, later
    requests reuse slots that earlier ones left dirty, and every slot comes back (rocm engine)."""
    from modelgen.runtime.engine.sampler import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    want = [llm(path, "rocm").generate_ids([p], params)[0] for p in prompts]
    tight = llm(path, "rocm", block_size=8, num_blocks=7, max_num_seqs=2)
    assert tight.generate_ids(prompts, params) == want
    assert tight.stats.preemptions > 0
    assert tight.state_pool.num_free == tight.state_pool.num_slots


def assert_chunked_prefill_equals_one_shot(path, target, prompt: list[int], max_tokens: int = 6) -> None:
    """A prompt prefilled 8 tokens per step continues exactly as one prefilled at once."""
    from modelgen.runtime.engine.sampler import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    want = llm(path, target).generate_ids([prompt], params)[0]
    extra = {"prefill_buckets": [8, 256]} if target == "neuron" else {}
    assert llm(path, target, max_num_batched_tokens=8, **extra).generate_ids([prompt], params)[0] == want


def assert_matches_hf(path, hf, target, prompt: list[int], label: str, atol: float = 1e-4) -> None:
    """The family gate: with every config.json key read or declared irrelevant (strict), fp32 prefill logits within
    ``atol`` of transformers' and 16 greedy tokens equal to its teacher-forced choices."""
    from modelgen.runtime.engine.sampler import SamplingParams

    model = llm(path, target, strict_config=True)
    err = (model.score(prompt).float() - hf_logits(hf, prompt)).abs().max().item()
    assert err < atol, f"{label}/{target}: prefill logits differ by {err}"
    out = model.generate_ids([prompt], SamplingParams(max_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy_forward(hf, prompt, 16), f"{label}/{target}: greedy tokens differ"


def assert_neuron_buckets_fullgraph(path, hf, prompts: list[list[int]], max_tokens: int = 6, **buckets) -> None:
    """Every neuron prefill / decode bucket traces with fullgraph=True at warm-up, and serving ``prompts`` in one
    batch afterwards never recompiles and gives transformers' teacher-forced greedy tokens."""
    from modelgen.runtime.engine.sampler import SamplingParams

    torch._dynamo.reset()
    model = llm(path, "neuron", max_model_len=64, block_size=8, max_num_seqs=len(prompts), compile=True, **buckets)
    model.runner.warmup()
    torch.compiler.set_stance("fail_on_recompile")
    try:
        got = model.generate_ids(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    finally:
        torch.compiler.set_stance("default")
    assert got == [hf_greedy_forward(hf, p, max_tokens) for p in prompts]


def assert_engine_batch_matches_hf(path, hf, target: str, label: str, max_tokens: int = 12) -> None:
    """Three sequences of 29, 21 and 13 tokens in one batch over 4-token blocks, prefilled 8 tokens per step (chunked
    prefill), then ``max_tokens`` paged decode steps each: every sequence's tokens equal transformers' teacher-forced
    choices. Then the first sequence fed 3 tokens per step over its cached prefix (the shape of a speculative verify
    step): every position's logits within 1e-4 of transformers'."""
    from modelgen.runtime.engine.sampler import SamplingParams
    from modelgen.runtime.testing.tiny_models import tiny_prompt
    from tests.test_sliding_window import chunked_score

    extra = {"prefill_buckets": [8, 128]} if target == "neuron" else {}
    model = llm(path, target, max_model_len=128, block_size=4, max_num_batched_tokens=8, max_num_seqs=3, **extra)
    prompts = [tiny_prompt(length=n, seed=s) for n, s in ((29, 1), (21, 2), (13, 3))]
    got = model.generate_ids(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    assert got == [hf_greedy_forward(hf, p, max_tokens) for p in prompts], f"{label}/{target}: greedy tokens differ"
    long = prompts[0] + got[0]
    err = (chunked_score(model, long, 3).float() - hf_logits(hf, long)).abs().max().item()
    assert err < 1e-4, f"{label}/{target}: 3-token steps over the cache differ from HF by {err}"
