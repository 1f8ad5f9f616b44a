"""The Mamba-2 families (specs/mamba2.yaml, bamba.yaml, nemotron_h.yaml: the mamba2 kind) under tensor parallelism and
the neuron target's bucket compile -- the slow cases tests/test_parity_jamba.py and test_parity_minimax.py have for
their kinds.

TP=2 (two gloo ranks, rocm and neuron in one spawn) gives TP=1's fp32 logits and 8 greedy tokens on every rank: the
ranks split the Mamba-2 heads and whole B/C groups (in_proj's z / x / B / C / dt parts, the conv's ``[x | B | C]``
channels and bias, dt_bias, A_log, D, the gated norm's weight; out_proj row-parallel), and with them the attention heads
and MLPs of Bamba and Nemotron-H. The checkpoints switch on every bias the mixers can have (in/out projection, conv;
attention and MLP biases where the family has them) so each sharded bias is loaded and checked too; a second Mamba2
case (two groups over two ranks, one group each, in a scan of several chunks) and the TP=1-vs-transformers gate of
each checkpoint keep the TP=1 side honest.

The neuron target's forward, compiled with ``torch.compile(fullgraph=True)`` per prefill and decode bucket, traces
without a graph break (warmup raises on one; afterwards a recompile raises) and gives the eager tokens for a batch of
two prompts of different lengths. Mamba2 compiles with inductor, as the target does; Bamba and Nemotron-H, whose mixer
is the same kind and whose attention / MLP blocks other families compile with inductor, with the ``aot_eager`` backend
(the same fullgraph trace and functionalised graph, no C++ codegen): a cold inductor compile of a Mamba-2 prefill bucket
takes 2-4 minutes on a 2-core machine.
"""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt
from tests.parity_helpers import (
    assert_matches_hf,
    assert_neuron_buckets_compile,
    assert_tp2_matches_tp1_on,
    checkpoint_cache,
)

TARGETS = ["rocm", "neuron"]
PROMPT = tiny_prompt()
SCALE = dict(initializer_range=0.1)  # logits of order 1, so every rank's half shows

# name -> (architecture, overrides): 2 groups over 2 ranks (whole groups per rank), biases on
CASES: dict[str, tuple[str, dict]] = {
    "mamba2": ("Mamba2ForCausalLM", dict(use_bias=True, time_step_limit=(0.05, 0.3), time_step_min=0.01,
                                         time_step_max=0.5)),
    # 4 groups (two per rank), no conv bias, conv kernel 3, tied embeddings
    "mamba2_groups4": ("Mamba2ForCausalLM", dict(n_groups=4, use_conv_bias=False, conv_kernel=3,
                                                 tie_word_embeddings=True)),
    "bamba": ("BambaForCausalLM", dict(attn_layer_indices=[0, 3], mamba_proj_bias=True, attention_bias=True,
                                       mlp_bias=True)),
    "nemotron_h": ("NemotronHForCausalLM", dict(use_bias=True, mlp_bias=True, layers_block_type=[
        "full_attention", "linear_attention", "mlp", "linear_attention"])),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return checkpoint_cache(tmp_path_factory, lambda d, name, _: make_tiny_checkpoint(
        d, CASES[name][0], **SCALE, **CASES[name][1]))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_tensor_parallel_2_equals_1(checkpoint, tmp_path, name):
    path, hf = checkpoint(name)
    assert_matches_hf(path, hf, "rocm", PROMPT, name)  # TP=1 is transformers' model on this checkpoint
    assert_tp2_matches_tp1_on(path, TARGETS, PROMPT, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name, backend", [("mamba2", "inductor"), ("bamba", "aot_eager"), ("nemotron_h", "aot_eager")])
def test_neuron_buckets_trace_fullgraph_and_never_recompile(checkpoint, name, backend, monkeypatch):
    """The shape-static conv and chunked scan (prefill) and the recurrent step (decode) compile in one graph per
    bucket: a host read or a data-dependent shape would break it."""
    import functools

    if backend != "inductor":  # the neuron runner calls torch.compile(forward, fullgraph=True, dynamic=False)
        monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=backend))
    assert_neuron_buckets_compile(checkpoint(name)[0], PROMPT)
