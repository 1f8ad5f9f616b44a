"""Tensor and pipeline parallelism of generated models inside real vLLM on the CPU: two worker processes (one core
each: these machines have one NUMA node, so vLLM's automatic thread binding refuses two workers and the cores are
bound by hand), greedy tokens against transformers as in test_vllm_parity.py.

Pipeline parallelism is not tested here: vLLM 0.32's CPU build fails ``pipeline_parallel_size=2`` for its own
LlamaForCausalLM too (the second stage's ``sync_and_gather_intermediate_tensors`` asserts before any model code
runs); the generated models implement ``SupportsPP`` (``make_layers``, ``PPMissingLayer``, intermediate tensors) for
vLLM's GPU builds."""
from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm")

from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt  # noqa: E402
from tests.vllm.harness import serve, teacher_forced_misses  # noqa: E402

PROMPTS = [tiny_prompt(), tiny_prompt(seed=3, length=40)]


@pytest.mark.parametrize("arch,parallel", [
    ("LlamaForCausalLM", dict(tensor_parallel_size=2)),
    ("Qwen3MoeForCausalLM", dict(tensor_parallel_size=2)),  # every expert's intermediate dim split in two
])
def test_two_workers_give_transformers_tokens(tmp_path, monkeypatch, arch, parallel):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")
    hf = make_tiny_checkpoint(tmp_path, arch, head_dim=32)
    served = serve(tmp_path, PROMPTS, max_tokens=8, **parallel)
    assert served.model_class.startswith("modelgen.generated.vllm."), served.model_class
    misses = [teacher_forced_misses(hf, p, t) for p, t in zip(PROMPTS, served.tokens)]
    assert not any(misses), misses
