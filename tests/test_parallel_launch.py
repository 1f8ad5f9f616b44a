"""Engine-started parallelism: ``LLM(..., tensor_parallel_size=2, expert_parallel_size=M)`` and ``modelgen run
--tensor-parallel-size 2`` spawn their own ranks (gloo on CPU) and equal N = 1; TP-sharded experts; dummy weights;
KV-cache sizing from a memory budget."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from modelgen.runtime import distributed
from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from tests.llama_fixtures import make_llama
from tests.moe_fixtures import make_moe

PROMPTS = [[1, 17, 42, 99, 3, 150, 64, 8], [5, 6, 7, 120, 33]]
GREEDY = SamplingParams(max_new_tokens=8, ignore_eos=True)


def _reference(path, target="rocm", **kw):
    llm = LLM(path, target=target, dtype="float32", max_model_len=64, **kw)
    return llm.score(PROMPTS[0]), llm.generate(PROMPTS, GREEDY)


def _parallel(path, target="rocm", **kw):
    llm = LLM(path, target=target, dtype="float32", max_model_len=64, **kw)
    try:
        assert dist.is_initialized() and dist.get_world_size() == 2  # rank 0 is this process
        return llm.score(PROMPTS[0]), llm.generate(PROMPTS, GREEDY)
    finally:
        llm.close()
        assert not dist.is_initialized()  # close() destroyed the group and stopped rank 1


def _assert_same(got, want):
    torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=1e-4)
    assert got[1] == want[1]


# ------------------------------------------------------------------------------------------------- pure functions
def test_moe_layout_covers_every_expert_slice_once():
    """Every (expert, intermediate slice) pair is held by exactly one rank, for EP, TP-sharded and hybrid layouts."""
    for world, ep in [(4, None), (4, 1), (4, 2), (2, 2), (8, 4)]:
        distributed.set_parallel_config(distributed.ParallelConfig(ep))
        try:
            held = []
            for rank in range(world):
                lay = distributed.moe_layout(8, world=world, rank=rank)
                assert lay.ep_size * lay.tp_size == world
                held += [(e, lay.tp_rank, lay.tp_size) for e in range(lay.expert_offset,
                                                                      lay.expert_offset + lay.num_local_experts)]
            tp = world // (ep or world)
            assert sorted(held) == [(e, r, tp) for e in range(8) for r in range(tp)]
        finally:
            distributed.set_parallel_config(distributed.ParallelConfig())


def test_sizes_are_checked_before_anything_starts(tmp_path):
    make_llama(tmp_path / "ckpt", "gqa")
    with pytest.raises(ValueError, match="expert_parallel_size 3 does not divide tensor_parallel_size 4"):
        LLM(tmp_path / "ckpt", tensor_parallel_size=4, expert_parallel_size=3)
    with pytest.raises(ValueError, match="tensor_parallel_size = 0"):
        LLM(tmp_path / "ckpt", tensor_parallel_size=0)
    assert not dist.is_initialized()


# -------------------------------------------------------------------------------------------------- launched ranks
@pytest.mark.slow
@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_tensor_parallel_2_started_by_llm_equals_1(tmp_path, target):
    make_llama(tmp_path / "ckpt", "mqa", tie_word_embeddings=True, vocab_size=161)  # replicated KV, padded vocab
    want = _reference(tmp_path / "ckpt", target)
    _assert_same(_parallel(tmp_path / "ckpt", target, tensor_parallel_size=2), want)


@pytest.mark.slow
def test_on_device_sampling_and_warmup_are_broadcast(tmp_path):
    """step_sample (sampling params travel as float64) and warmup reach rank 1: tokens equal N = 1, seeded sampling
    included (rank 0's sample is the one used)."""
    make_llama(tmp_path / "ckpt", "gqa")
    kw = dict(target="neuron", dtype="float32", max_model_len=64, on_device_sampling=True, max_num_seqs=2,
              prefill_buckets=[16], decode_buckets=[2], decode_context_buckets=[64])
    params = [GREEDY, SamplingParams(max_new_tokens=8, ignore_eos=True, temperature=0.8, top_k=20, seed=3)]
    want = LLM(tmp_path / "ckpt", **kw).generate(PROMPTS, GREEDY)
    llm = LLM(tmp_path / "ckpt", tensor_parallel_size=2, **kw)
    try:
        llm.warmup()
        assert llm.generate(PROMPTS, GREEDY) == want
        sampled = llm.generate(PROMPTS, params)
        assert sampled[0] == want[0] and len(sampled[1]) == 8
    finally:
        llm.close()


@pytest.mark.slow
@pytest.mark.parametrize("target", ["rocm", "neuron"])
@pytest.mark.parametrize("ep", [2, 1])  # whole experts on each rank (EP=2) / every expert TP-sharded (EP=1)
@pytest.mark.parametrize("fused", [False, True])
def test_moe_expert_and_tp_sharded_experts_equal_1(tmp_path, target, ep, fused):
    """GLM4-MoE: 8 routed experts, a shared expert (its slots sharded too on rocm), a dense first layer."""
    make_moe(tmp_path / "ckpt", "glm4_moe_qknorm", fused=fused)
    want = _reference(tmp_path / "ckpt", target)
    _assert_same(_parallel(tmp_path / "ckpt", target, tensor_parallel_size=2, expert_parallel_size=ep), want)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_gpt_oss_tp_sharded_experts_equal_1(tmp_path, target):
    """GPT-OSS: interleaved fused gate/up, expert biases (the down bias added by one slice only), 3 experts."""
    from tests.gpt_oss_fixtures import make_gpt_oss

    make_gpt_oss(tmp_path / "ckpt", num_local_experts=3)
    want = _reference(tmp_path / "ckpt", target)
    _assert_same(_parallel(tmp_path / "ckpt", target, tensor_parallel_size=2, expert_parallel_size=1), want)


@pytest.mark.slow
def test_tp_sharded_experts_need_not_divide_the_world(tmp_path):
    """Mixtral with 3 experts: EP=2 is refused with one line, TP-sharded experts run and equal N = 1."""
    make_moe(tmp_path / "ckpt", "mixtral", num_local_experts=3)
    with pytest.raises(ValueError, match=r"num_experts \(3\) is not divisible by the expert-parallel size \(2\)"):
        LLM(tmp_path / "ckpt", dtype="float32", expert_parallel_size=2)  # EP alone: 2 ranks
    assert not dist.is_initialized()  # the failed build stopped the ranks it had started
    for target in ("rocm", "neuron"):
        want = _reference(tmp_path / "ckpt", target)
        _assert_same(_parallel(tmp_path / "ckpt", target, tensor_parallel_size=2, expert_parallel_size=1), want)


@pytest.mark.slow
def test_cli_tensor_and_expert_parallel_print_one_output(tmp_path):
    make_moe(tmp_path / "ckpt", "qwen3_moe_norm")
    ids = ",".join(map(str, PROMPTS[0]))
    base = [sys.executable, "-m", "modelgen.cli", "run", "--checkpoint", str(tmp_path / "ckpt"),
            "--prompt-ids", ids, "--max-new-tokens", "6", "--ignore-eos", "--dtype", "float32", "--json"]
    outs = []
    for extra in ([], ["--tensor-parallel-size", "2"], ["--tensor-parallel-size", "2", "--expert-parallel-size", "1"]):
        proc = subprocess.run(base + extra, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.strip().splitlines()
        assert len(lines) == 1  # one output, rank 0's
        outs.append(json.loads(lines[0])["outputs"])
    assert outs[1] == outs[0] and outs[2] == outs[0]


# --------------------------------------------------------------------------------------------------- dummy weights
def test_dummy_weights_from_config_alone(tmp_path):
    make_llama(tmp_path / "ckpt", "gqa")
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text((tmp_path / "ckpt" / "config.json").read_text())  # no weights
    a = LLM(tmp_path / "cfg", dtype="float32", max_model_len=64, load_format="dummy")
    b = LLM(tmp_path / "cfg", dtype="float32", max_model_len=64, load_format="dummy")
    p = dict(a.model.named_parameters())
    assert all(torch.equal(t, p[n]) for n, t in b.model.named_parameters())  # a function of the names and seed
    norm = next(t for n, t in p.items() if n.endswith("norm.weight"))
    assert torch.equal(norm, torch.ones_like(norm))
    qkv = next(t for n, t in p.items() if "qkv" in n)
    assert 0.01 < qkv.std().item() < 0.03  # initializer_range 0.02
    assert a.generate(PROMPTS, GREEDY) == b.generate(PROMPTS, GREEDY)
    z = LLM(tmp_path / "cfg", dtype="float32", max_model_len=64, load_format="dummy_zeros")
    assert all(not t.any() for n, t in z.model.named_parameters() if not n.endswith("norm.weight"))
    with pytest.raises(ValueError, match="load_format 'random'"):
        LLM(tmp_path / "cfg", load_format="random")


@pytest.mark.slow
def test_dummy_weights_are_tensor_parallel_consistent(tmp_path):
    """Each rank's dummy shard is the slice of the one full tensor: TP=2 equals TP=1 on dummy weights."""
    make_moe(tmp_path / "ckpt", "qwen3_moe_norm")
    want = _reference(tmp_path / "ckpt", load_format="dummy")
    _assert_same(_parallel(tmp_path / "ckpt", tensor_parallel_size=2, load_format="dummy"), want)


# ------------------------------------------------------------------------------------------------ KV-cache budget
def test_kv_cache_sized_from_a_memory_budget(tmp_path):
    make_llama(tmp_path / "ckpt", "gqa")
    llm = LLM(tmp_path / "ckpt", dtype="float32", max_model_len=64, num_blocks=4)
    per_block = llm.model.get_kv_spec().bytes_per_block(16)  # 2 layers x K,V x 2 heads x 16 x 16 x 4 bytes
    assert per_block == 2 * 2 * 2 * 16 * 16 * 4
    budget = 37 * per_block + per_block // 2
    sized = LLM(tmp_path / "ckpt", dtype="float32", max_model_len=64, kv_cache_memory=budget)
    assert sized.blocks.num_blocks == 37
    assert sized.generate(PROMPTS, GREEDY) == llm.generate(PROMPTS, GREEDY)
    with pytest.raises(ValueError, match="holds 3 KV blocks .* fewer than the 4 one max_model_len request needs"):
        LLM(tmp_path / "ckpt", dtype="float32", max_model_len=64, kv_cache_memory=3 * per_block)
    with pytest.raises(ValueError, match="gpu_memory_utilization applies to a CUDA device"):
        LLM(tmp_path / "ckpt", dtype="float32", max_model_len=64, gpu_memory_utilization=0.9)


def test_rocm_tp_loading_reads_slices_not_whole_tensors(monkeypatch):
    """Under TP the rocm target hands the packed loader a checkpoint with raw_reads False: no GPU read-ahead of whole
    tensors, each parameter loader narrows the memory-mapped tensor to its slice."""
    from modelgen.runtime.targets import get_target

    seen = []

    class Model:
        def load_weights(self, checkpoint):
            seen.append((checkpoint.raw_reads, checkpoint.keys()))

    class Ckpt:
        raw_reads = True

        def keys(self):
            return ["a"]

    target = get_target("rocm")
    target.load(Model(), Ckpt())
    monkeypatch.setattr(distributed, "tp_size", lambda: 2)
    target.load(Model(), Ckpt())
    assert seen == [(True, ["a"]), (False, ["a"])]


def test_speculative_decoding_with_pipeline_or_attention_dp_is_refused(tmp_path):
    """Under TP the followers mirror the speculative calls (launch.SPEC, tests/test_speculative_tp.py); a pipeline
    stage or an attention-DP rank holds only part of the target, so those are refused before any rank starts."""
    make_llama(tmp_path / "ckpt", "gqa")
    for mode in ({"pipeline_parallel_size": 2}, {"data_parallel_size": 2}):
        with pytest.raises(ValueError, match="speculative_tokens with pipeline_parallel_size / data_parallel_size"):
            LLM(tmp_path / "ckpt", speculative_tokens=1, **mode)
    assert not dist.is_initialized()
