"""Serve a tiny transformers checkpoint with real vLLM and judge its greedy tokens against transformers.

vLLM runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set by conftest.py before vLLM is imported): one
engine start costs about a second after the first, where a separate engine process would re-import vLLM each time.
The judge is teacher-forced: transformers (float32) reads the prompt plus vLLM's tokens once, and every vLLM token
must be transformers' argmax at its position, or within ``TIE_MARGIN`` of it (a near-tie either may break).
"""
from __future__ import annotations

import gc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

TIE_MARGIN = 1e-3  # float32 logits of two engines differ by ~1e-5; a gap below this is a tie either may break


@dataclass
class Served:
    tokens: list[list[int]]  # greedy tokens per prompt
    model_class: str  # module:Class vLLM built


def model_class_name(model: torch.nn.Module) -> str:
    """``module:Class`` of the model a vLLM worker built (module level: TP workers receive it pickled)."""
    return f"{type(model).__module__}:{type(model).__qualname__}"


def serve(path: str | Path, prompts: Sequence[Sequence[int]], max_tokens: int = 8, **kwargs: Any) -> Served:
    """Greedy tokens of ``prompts`` from ``vllm.LLM`` over the checkpoint at ``path`` (float32, eager)."""
    import vllm

    options = dict(skip_tokenizer_init=True, dtype="float32", max_model_len=512, enforce_eager=True,
                   kv_cache_memory_bytes=1 << 26, max_num_seqs=8, seed=0)
    options.update(kwargs)
    llm = vllm.LLM(model=str(path), **options)
    try:
        cls = llm.apply_model(model_class_name)[0]
        params = vllm.SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        outs = llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        return Served([list(o.outputs[0].token_ids) for o in outs], cls)
    finally:
        del llm
        gc.collect()


def teacher_forced_misses(hf_model: torch.nn.Module, prompt: Sequence[int], tokens: Sequence[int],
                          margin: float = TIE_MARGIN) -> list[str]:
    """Positions where vLLM's token is not transformers' float32 greedy choice (beyond a near-tie of ``margin``)."""
    ids = torch.tensor([list(prompt) + list(tokens)])
    with torch.no_grad():
        logits = hf_model.float()(ids).logits[0, len(prompt) - 1: -1]
    misses = []
    for i, (row, tok) in enumerate(zip(logits, tokens)):
        best = int(row.argmax())
        if best != tok and float(row[best] - row[tok]) > margin:
            misses.append(f"token {i}: vLLM {tok} (logit {float(row[tok]):.5f}), transformers {best} "
                          f"(logit {float(row[best]):.5f})")
    return misses
