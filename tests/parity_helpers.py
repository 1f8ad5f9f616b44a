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
