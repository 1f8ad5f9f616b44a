"""Zamba2 (specs/zamba2.yaml: Mamba-2 layers and hybrid layers that first run a SHARED transformer block -- the
shared_block kind) vs transformers' Zamba2ForCausalLM on tiny random checkpoints.

The tiny schedule (runtime/testing/tiny_models.py ARCH_SIZES) is mamba, hybrid, hybrid, mamba, hybrid over two
shared-block copies: copy 0 serves depths 1 and 4, copy 1 depth 2. Cases cover what Zamba2Config switches: one or two
copies (num_mem_blocks), q/k/v adapters on and off (use_shared_attention_adapter; the gate_up adapters are always
built by transformers' Zamba2MLP, which has no use_shared_mlp_adapter), RoPE in the shared attention on and off
(use_mem_rope) with a scaling and use_long_context, biases (add_bias_linear), tied and untied embeddings (transformers
ties the shared copies only with tie_word_embeddings: untied, every hybrid layer has its own weights), GQA, Mamba-2
groups 1 and 2 and chunk sizes. Gates: fp32 prefill logits within 1e-4 and 16 greedy tokens equal to transformers'
(teacher-forced), on rocm and neuron. Negative controls: dropping the adapters, the embedding concat, or giving two
depths of one copy the same K/V cache moves the output.
"""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.hf_config import ConfigError
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt
from tests.parity_helpers import (
    assert_chunked_prefill_equals_one_shot,
    assert_interleaved_equal_solo,
    assert_matches_hf,
    assert_preemption_restarts_fresh,
    checkpoint_cache,
    hf_logits,
    llm,
)

TARGETS = ["rocm", "neuron"]
PREFILL_ATOL = 1e-4
PROMPT = tiny_prompt()
SCALE = dict(initializer_range=0.1)  # logits of order 1, so every layer's contribution shows

CASES: dict[str, dict] = {
    # tiny defaults: two copies, untied embeddings (so untied copies), GQA 4 / 2, no q/k/v adapters, no RoPE
    "zamba2": dict(),
    # every feature on: tied (copy 0 really serves depths 1 and 4), q/k/v adapters (K/V heads = heads), RoPE with a
    # linear scaling, biases
    "zamba2_features": dict(tie_word_embeddings=True, use_shared_attention_adapter=True, num_key_value_heads=4,
                            use_mem_rope=True, add_bias_linear=True,
                            rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
    # one copy for all three hybrid layers, adapters on, one Mamba group, chunks of 5, RoPE with its own base and the
    # long-context table
    "zamba2_one_block": dict(tie_word_embeddings=True, num_mem_blocks=1, use_shared_attention_adapter=True,
                             num_key_value_heads=4, mamba_ngroups=1, chunk_size=5, use_mem_rope=True,
                             use_long_context=True, rope_parameters={"rope_type": "default", "rope_theta": 500.0}),
    # three copies over three hybrid layers, hybrid first, a single scan chunk
    "zamba2_three_blocks": dict(num_mem_blocks=3, chunk_size=64, num_hidden_layers=4,
                                layers_block_type=["hybrid", "linear_attention", "hybrid", "hybrid"]),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return checkpoint_cache(tmp_path_factory,
                            lambda d, name, _: make_tiny_checkpoint(d, "Zamba2ForCausalLM", **SCALE, **CASES[name]))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_hf_zamba2_fp32(checkpoint, name, target):
    assert_matches_hf(*checkpoint(name), target, PROMPT, name)


def test_shared_copies_follow_the_schedule(checkpoint):
    """Tied: one copy object per num_mem_blocks, round-robin over the hybrid layers, each hybrid layer its own cache
    and output projection; untied: every hybrid layer its own copy (as transformers)."""
    layers = llm(checkpoint("zamba2_features")[0], "rocm").model.model.layers
    assert [layer.shared_use for layer in layers] == [None, 0, 1, None, 2]
    assert layers[1].shared_transformer is layers[4].shared_transformer
    assert layers[1].shared_transformer is not layers[2].shared_transformer
    assert layers[1].linear is not layers[4].linear
    caches = [layers[i].shared_transformer_cache for i in (1, 2, 4)]
    assert len({c.layer_name for c in caches}) == 3 and caches[0].k_cache is not caches[2].k_cache
    untied = llm(checkpoint("zamba2")[0], "rocm").model.model.layers
    assert len({id(untied[i].shared_transformer) for i in (1, 2, 4)}) == 3


def _moved(model, ref) -> float:
    return (model.score(PROMPT).float() - ref).abs().max().item()


def test_adapters_matter(checkpoint):
    """Negative control: without the per-use LoRA adapters (q/k/v and gate_up) the logits move."""
    path, hf = checkpoint("zamba2_features")
    model = llm(path, "rocm")
    ref = hf_logits(hf, PROMPT)
    assert _moved(model, ref) < PREFILL_ATOL
    block = model.model.model.layers[1].shared_transformer
    block.attention_adapters = False
    assert _moved(model, ref) > 1e-3
    block.attention_adapters = True
    with torch.no_grad():  # the gate_up adapters dropped: B(A(x)) = 0
        for weight in block.feed_forward.gate_up_proj_adapter_list.parameters():
            weight.zero_()
    assert _moved(model, ref) > 1e-3


def test_embedding_concat_matters(checkpoint):
    """Negative control: the shared block fed concat(x, x) instead of concat(x, embeddings) moves the logits."""
    path, hf = checkpoint("zamba2_features")
    model = llm(path, "rocm")
    ref = hf_logits(hf, PROMPT)
    for block in {id(layer.shared_transformer): layer.shared_transformer
                  for layer in model.model.model.layers if layer.shared_use is not None}.values():
        forward = block.forward
        block.forward = lambda positions, x, embeddings, *rest, f=forward: f(positions, x, x, *rest)
    assert _moved(model, ref) > 1e-3


@pytest.mark.parametrize("target", TARGETS)
def test_each_depth_keeps_its_own_kv_cache(checkpoint, target):
    """Copy 0 runs at depths 1 and 4 with two caches: binding depth 4 to depth 1's cache changes the decoded tokens
    (the caches must not mix), while the separate caches give transformers' tokens (test_against_hf_zamba2_fp32)."""
    path, _ = checkpoint("zamba2_features")
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    want = llm(path, target).generate_ids([PROMPT], params)[0]
    model = llm(path, target)
    layers = model.model.model.layers
    first, last = layers[1].shared_transformer_cache, layers[4].shared_transformer_cache
    assert first.layer_name != last.layer_name and first.k_cache is not last.k_cache
    last.k_cache, last.v_cache = first.k_cache, first.v_cache
    assert model.generate_ids([PROMPT], params)[0] != want


@pytest.mark.parametrize("target", TARGETS)
def test_interleaved_requests_each_get_their_solo_tokens(checkpoint, target):
    """Several sequences decoding together through the shared block's per-depth caches and the Mamba states."""
    assert_interleaved_equal_solo(checkpoint("zamba2_features")[0], target, [PROMPT, PROMPT[:5], PROMPT[7:20], [3]])


def test_preempted_and_reused_slots_start_fresh(checkpoint):
    assert_preemption_restarts_fresh(checkpoint("zamba2_features")[0], [PROMPT, PROMPT[4:], PROMPT[:9]])


@pytest.mark.parametrize("target", TARGETS)
def test_chunked_prefill_equals_one_shot(checkpoint, target):
    assert_chunked_prefill_equals_one_shot(checkpoint("zamba2_one_block")[0], target, PROMPT)


# ------------------------------------------------------------------------------------ parallelism and compilation
@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_tensor_parallel_2_equals_1(checkpoint, tmp_path, target):
    """Two gloo ranks split the shared attention's heads (q/k/v, the adapters' B rows, o_proj), the shared MLP's
    gate and up halves (stored fused) and the Mamba channels: same logits, same tokens."""
    import json

    import torch.multiprocessing as mp
    from safetensors.torch import load_file

    from tests.test_parity_qwen3_next import run_rank  # tests/tp_worker.py reads an attention cache at layer 0

    path, _ = checkpoint("zamba2_features")
    single = llm(path, target)
    want = single.score(PROMPT)
    want_tokens = single.generate_ids([PROMPT], SamplingParams(max_tokens=8, ignore_eos=True))[0]
    out = str(tmp_path / "result")
    mp.spawn(run_rank, args=(2, str(tmp_path / "init"), str(path), target, PROMPT, out), nprocs=2)
    for rank in range(2):
        torch.testing.assert_close(load_file(f"{out}.rank{rank}.safetensors")["logits"], want, atol=1e-4, rtol=1e-4)
        with open(f"{out}.rank{rank}.json") as f:
            assert json.load(f)["tokens"] == want_tokens, f"rank {rank}: greedy tokens differ"


@pytest.mark.slow
def test_neuron_buckets_trace_fullgraph_and_never_recompile(checkpoint):
    """The shared block (its per-depth caches) and the mixers compile in one graph per bucket."""
    torch._dynamo.reset()
    path, _ = checkpoint("zamba2_features")
    buckets = dict(prefill_buckets=[128], decode_buckets=[1, 2], decode_context_buckets=[128], max_model_len=128,
                   max_num_seqs=2, block_size=16)
    prompts = [PROMPT, PROMPT[:9]]
    params = SamplingParams(max_tokens=5, ignore_eos=True)
    want = llm(path, "neuron", **buckets).generate_ids(prompts, params)
    compiled = llm(path, "neuron", compile=True, **buckets)
    compiled.warmup()  # fullgraph=True: a graph break in any bucket raises here; afterwards recompiles raise
    assert compiled.generate_ids(prompts, params) == want


# ---------------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("mode", [dict(pipeline_parallel_size=2), dict(data_parallel_size=2)])
def test_pipeline_and_attention_dp_are_refused(mode):
    """A later pipeline stage has no embeddings (its placeholder returns zeros), which every hybrid layer reads."""
    from modelgen.generated.rocm.zamba2.model import Zamba2ForCausalLM
    from modelgen.runtime import distributed as dist
    from modelgen.runtime.testing.tiny_models import tiny_config

    from modelgen.generated.rocm.zamba2.config import Zamba2Config

    cfg = Zamba2Config.from_hf_config(tiny_config("Zamba2ForCausalLM"))
    before = dist.parallel_config()
    dist.set_parallel_config(dist.ParallelConfig(**mode))
    try:
        with pytest.raises(NotImplementedError, match="reads the token embeddings in every hybrid layer"):
            Zamba2ForCausalLM(cfg)
    finally:
        dist.set_parallel_config(before)
    Zamba2ForCausalLM(cfg)  # builds once the mode is off


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("overrides, message", [
    (dict(hidden_act="silu"), r"hidden_act other than gelu"),
    (dict(use_shared_attention_adapter=True), r"use_shared_attention_adapter with num_key_value_heads"),
])
def test_refused_configs_name_the_spec_rule(tmp_path, target, overrides, message):
    make_tiny_checkpoint(tmp_path, "Zamba2ForCausalLM", **overrides)
    with pytest.raises(ConfigError, match=rf"config\.json: specs/zamba2\.yaml: {message}"):
        llm(tmp_path, target)
