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
