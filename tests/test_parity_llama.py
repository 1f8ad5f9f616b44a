"""test_against_hf_llama: generated Llama (rocm + neuron targets) vs transformers' LlamaForCausalLM.

For each tiny configuration and target:
  * prefill logits vs HF fp32 within PREFILL_ATOL (float32 end to end; only summation order differs);
  * 16 greedy tokens equal to HF ``generate`` in fp32;
  * three-way bf16 check (vLLM Neuron guide): HF fp32 is gold, HF bf16 is the precision floor, and modelgen bf16
    must be within THREE_WAY_FACTOR x the floor's error (+ a small absolute slack for near-zero floors).
"""
from __future__ import annotations

import copy

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams

from tests.llama_fixtures import LLAMA_CONFIGS

PREFILL_ATOL = 1e-4
THREE_WAY_FACTOR = 2.0
PROMPT = [1, 17, 42, 99, 3, 150, 64, 8, 23, 77, 5, 130]
TARGETS = ["rocm", "neuron"]


def hf_logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def hf_greedy(model, ids, n: int) -> list[int]:
    """HF greedy decoding that runs past EOS without touching logits (generate's min_new_tokens would mask EOS)."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0,
        )
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", [n for n in LLAMA_CONFIGS])
def test_against_hf_llama_fp32(llama_checkpoint, name, target):
    path, hf = llama_checkpoint(name)
    llm = LLM(path, target=target, dtype="float32", max_model_len=128)
    got = llm.score(PROMPT).float()
    want = hf_logits(hf, PROMPT)
    assert got.shape == want.shape
    err = (got - want).abs().max().item()
    assert err < PREFILL_ATOL, f"{name}/{target}: prefill logits differ by {err}"

    ref_tokens = hf_greedy(hf, PROMPT, 16)
    out = llm.generate([PROMPT], SamplingParams(max_new_tokens=16, ignore_eos=True))[0]
    assert out == ref_tokens, f"{name}/{target}: greedy tokens differ"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["gqa", "tied", "llama3_rope", "bias", "head_dim"])
def test_against_hf_llama_bf16_three_way(llama_checkpoint, name, target):
    path, hf = llama_checkpoint(name)
    gold = hf_logits(hf, PROMPT)
    hf_bf16 = hf_logits(copy.deepcopy(hf).to(torch.bfloat16), PROMPT)  # a copy: the fixture's model stays fp32
    llm = LLM(path, target=target, dtype="bfloat16", max_model_len=128)
    ours = llm.score(PROMPT).float()
    floor = (hf_bf16 - gold).abs().max().item()
    err = (ours - gold).abs().max().item()
    assert err <= THREE_WAY_FACTOR * floor + 1e-2, f"{name}/{target}: bf16 error {err:.4f} vs HF bf16 floor {floor:.4f}"
    # And the argmax agrees with gold wherever gold is decisive (top-2 margin above the bf16 noise).
    top2 = gold.topk(2, dim=-1).values
    decisive = (top2[:, 0] - top2[:, 1]) > 4 * max(floor, err)
    assert torch.equal(ours.argmax(-1)[decisive], gold.argmax(-1)[decisive])
