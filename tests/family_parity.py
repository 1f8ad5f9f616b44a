"""The checks tests/test_parity_{gpt_neox,dbrx,falcon}.py share (issue 26): each family lists its tiny configs and
its feature-off edits; these compare modelgen's model with transformers' on them."""
from __future__ import annotations

import copy
from typing import Any, Callable

import torch

from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.testing import assert_close_three_way
from modelgen.runtime.testing.tiny_models import tiny_prompt
from tests.parity_helpers import hf_greedy_forward, hf_logits, llm
from tests.test_parity_llama import THREE_WAY_ATOL, THREE_WAY_FACTOR

TARGETS = ["rocm", "neuron"]
PREFILL_ATOL = 1e-4
PROMPT = tiny_prompt()
MAX_LEN = 128


def checkpoint_getter(tmp_path_factory, make: Callable[[Any, str], Any]) -> Callable[[str], tuple[Any, Any]]:
    """``get(name) -> (dir, hf_model)``: ``make(dir, name)`` saves the case's tiny checkpoint, once per module."""
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            d = tmp_path_factory.mktemp(name)
            cache[name] = (d, make(d, name))
        return cache[name]

    return get


def assert_fp32_parity(path, hf, name: str, target: str) -> None:
    """fp32 prefill logits within PREFILL_ATOL (every config.json key read or ignored) and 16 greedy tokens equal."""
    model = llm(path, target, strict_config=True, max_model_len=MAX_LEN)
    err = (model.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < PREFILL_ATOL, f"{name}/{target}: prefill logits differ by {err}"
    out = model.generate_ids([PROMPT], SamplingParams(max_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy_forward(hf, PROMPT, 16), f"{name}/{target}: greedy tokens differ"


def assert_bf16_three_way(path, hf, name: str, target: str) -> None:
    gold = hf_logits(hf, PROMPT)
    floor = hf_logits(copy.deepcopy(hf).to(torch.bfloat16), PROMPT)
    ours = llm(path, target, dtype="bfloat16", max_model_len=MAX_LEN).score(PROMPT).float()
    assert_close_three_way(gold, floor, ours, factor=THREE_WAY_FACTOR, atol=THREE_WAY_ATOL, name=f"{name}/{target}")


def err_after(path, ref: torch.Tensor, edit: Callable[[Any], Any], target: str) -> float:
    """modelgen's fp32 prefill logits after ``edit(model)``, against ``ref``: max abs difference."""
    model = llm(path, target, max_model_len=MAX_LEN)
    with torch.no_grad():
        edit(model.model)
    return (model.score(PROMPT).float() - ref).abs().max().item()
