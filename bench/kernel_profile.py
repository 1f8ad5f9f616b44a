"""Per-kernel GPU time of eager decode steps (``--profile-batches`` of ``decode.py``, ``arch.py``, ``gdn_ab.py``):
where a step's time goes, kernel by kernel.
"""
from __future__ import annotations

from pathlib import Path

import torch

from bench.common import log


def kernel_profile(ckpt: Path, kw: dict, prompts: list[list[int]], steps: int = 8, top: int = 25, llm=None) -> dict:
    """Per-kernel GPU time of ``steps`` decode steps of ``len(prompts)`` sequences run eagerly (no CUDA graphs, so
    each kernel is visible to the profiler; the kernels are the ones the graphs replay), grouped by kernel name: where
    a step's time goes. ``llm``: an eager engine to reuse (several batch sizes without a reload)."""
    from torch.profiler import ProfilerActivity, profile

    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams

    if llm is None:
        llm = LLM(ckpt, **dict(kw, cuda_graphs=False))
    params = lambda n: SamplingParams(max_new_tokens=n, ignore_eos=True)  # noqa: E731
    llm.generate(prompts, params(steps + 1))  # compile every kernel first
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        llm.generate(prompts, params(1))
        torch.cuda.synchronize()
    prefill = {e.key: e.device_time_total for e in prof.key_averages()}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        llm.generate(prompts, params(steps + 1))
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():  # minus the prefill + first token, which both runs share
        us = (e.device_time_total - prefill.get(e.key, 0.0)) / steps
        if us > 0:
            rows.append((e.key[:120], us, e.count))
    rows.sort(key=lambda r: -r[1])
    total = sum(r[1] for r in rows)
    out = {"batch": len(prompts), "steps": steps, "gpu_us_per_step": total,
           "top_kernels_us_per_step": [{"kernel": k, "us": us, "calls_total": n} for k, us, n in rows[:top]]}
    for r in rows[:top]:
        log(f"  bs{len(prompts)} {r[1]:8.1f} us/step  {r[0]}")
    log(f"  bs{len(prompts)} total GPU time {total:.1f} us/step over {steps} steps")
    return out


def kernel_profiles(ckpt: Path, kw: dict, prompts_by_batch: dict, batches: list[int]) -> dict:
    """:func:`kernel_profile` at each of ``batches`` on one eager engine; a failed batch records its error."""
    from modelgen.runtime.engine.llm import LLM

    llm = LLM(ckpt, **dict(kw, cuda_graphs=False))
    out = {}
    for b in batches:
        try:
            out[str(b)] = kernel_profile(ckpt, kw, prompts_by_batch[b].tolist(), llm=llm)
        except Exception as e:
            out[str(b)] = f"{type(e).__name__}: {e}"[:400]
    del llm
    return out
