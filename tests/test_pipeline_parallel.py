"""Multi-process pipeline parallelism (rocm, gloo on CPU): ``LLM(..., pipeline_parallel_size=2)`` starts the ranks,
each builds and loads only its stage, the stages hand hidden + residual over send/recv, and logits / greedy tokens
equal one process."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.parallel.pipeline import PPBoundary, PPMissingHead, PPMissingLayer
from tests.llama_fixtures import make_llama
from tests.moe_fixtures import make_moe
from tests.parallel_helpers import cli_outputs, record_receives

PROMPTS = [[1, 17, 42, 99, 3, 150, 64, 8], [5, 6, 7, 120, 33], [9, 10]]
GREEDY = SamplingParams(max_new_tokens=6, ignore_eos=True)
SAMPLED = [SamplingParams(max_new_tokens=6, ignore_eos=True, temperature=0.8, top_k=20, seed=s) for s in range(3)]


def _reference(path, **kw):
    llm = LLM(path, dtype="float32", max_model_len=64, **kw)
    return llm.score(PROMPTS[0]), llm.generate(PROMPTS, GREEDY)


def _assert_same(got, want):
    torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=1e-4)
    assert got[1] == want[1]


def test_pipeline_sizes_are_checked(tmp_path):
    make_llama(tmp_path, "gqa")
    with pytest.raises(ValueError, match="pipeline_parallel_size = 0"):
        LLM(tmp_path, pipeline_parallel_size=0)
    with pytest.raises(ValueError, match="implemented for the rocm target, not neuron"):
        LLM(tmp_path, target="neuron", pipeline_parallel_size=2)
    with pytest.raises(ValueError, match="with sequence_parallel"):
        LLM(tmp_path, pipeline_parallel_size=2, tensor_parallel_size=2, sequence_parallel=True)
    assert not dist.is_initialized()


def test_torchrun_style_ranks_are_refused(tmp_path):
    """An already-initialised world (torchrun: every rank its own engine) cannot drive a pipeline: one line."""
    make_llama(tmp_path, "gqa")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0, world_size=1)
    try:
        for mode in ({"pipeline_parallel_size": 2}, {"data_parallel_size": 2}):
            with pytest.raises(ValueError, match="need the ranks the engine starts"):
                LLM(tmp_path, **mode)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("case", ["llama", "llama_tied", "qwen3_moe", "gemma2"])
def test_pipeline_parallel_2_equals_1(tmp_path, case, monkeypatch):
    if case == "qwen3_moe":  # 4 layers: MoE layers 0, 2, 3 and a dense layer 1 (mlp_only_layers) on stage 0
        make_moe(tmp_path, "qwen3_moe_norm", num_hidden_layers=4)
    elif case == "gemma2":  # tied, embeddings x sqrt(hidden) (stage 1 scales a zero block), sandwich norms
        from tests.test_parity_families import make_checkpoint

        make_checkpoint(tmp_path, "gemma2")
    else:
        make_llama(tmp_path, "tied" if case == "llama_tied" else "gqa", num_hidden_layers=3)
    want = _reference(tmp_path)
    want_sampled = LLM(tmp_path, dtype="float32", max_model_len=64).generate(PROMPTS, SAMPLED)
    assert want_sampled != want[1]  # the sampled run is not the greedy one
    llm = LLM(tmp_path, dtype="float32", max_model_len=64, pipeline_parallel_size=2)
    try:
        assert dist.get_world_size() == 2
        model = llm.model  # rank 0 = stage 0: layers [0, 2), the embedding; no final norm, no LM head
        layers = model.model.layers
        n = len(layers._modules)
        assert n in (3, 4) and [isinstance(layers[i], PPMissingLayer) for i in range(n)] == [i >= 2 for i in range(n)]
        assert isinstance(model.model.norm, PPBoundary) and isinstance(model.lm_head, PPMissingHead)
        names = {name for name, _ in model.named_parameters()}
        assert not any(name.startswith(("lm_head.", "model.norm.")) for name in names)
        assert {int(name.split(".")[2]) for name in names if name.startswith("model.layers.")} == {0, 1}
        assert len(llm.model.get_kv_spec().layers) == 2  # KV cache for the stage's layers only
        received = record_receives(monkeypatch)
        got_logits = llm.score(PROMPTS[0])
        assert received == [(torch.float32, (len(PROMPTS[0]), llm.vocab_size))]  # score: logits from stage 1
        received.clear()
        _assert_same((got_logits, llm.generate(PROMPTS, GREEDY)), want)
        assert received and all(dtype == torch.int64 and len(shape) == 1 for dtype, shape in received)  # ids only
        # seeded sampling: rank 0 samples the last stage's float32 logits with its own per-request generators
        assert llm.generate(PROMPTS, SAMPLED) == want_sampled
    finally:
        llm.close()
    assert not dist.is_initialized()


@pytest.mark.slow
def test_stage_loads_only_its_tensors(tmp_path, monkeypatch):
    """Stage 0's loader reads the tensors of layers 0-1 and the embedding, nothing of layer 2, the norm or LM head."""
    from modelgen.runtime.loader.checkpoint import Checkpoint

    make_llama(tmp_path, "gqa", num_hidden_layers=3)
    read = []
    original = Checkpoint.get_tensor

    def counting(self, key, *a, **kw):
        read.append(key)
        return original(self, key, *a, **kw)

    monkeypatch.setattr(Checkpoint, "get_tensor", counting)
    llm = LLM(tmp_path, dtype="float32", max_model_len=64, pipeline_parallel_size=2)
    llm.close()
    assert read and all(k.startswith(("model.embed_tokens.", "model.layers.0.", "model.layers.1.")) for k in read)
    assert any(k.startswith("model.layers.1.") for k in read)


@pytest.mark.slow
def test_pipeline_times_tensor_parallel_2x2_equals_1(tmp_path):
    """4 ranks: 2 stages x TP 2 (rank = stage * 2 + tp rank); the fused down_proj all-reduce crosses the stage
    boundary as partial sums, reduced by the next stage's input norm."""
    make_llama(tmp_path, "gqa", num_hidden_layers=3)
    want = _reference(tmp_path)
    llm = LLM(tmp_path, dtype="float32", max_model_len=64, pipeline_parallel_size=2, tensor_parallel_size=2)
    try:
        assert dist.get_world_size() == 4
        qkv = llm.model.model.layers[0].self_attn.qkv_proj
        assert qkv.tp_size == 2 and qkv.weight.shape[0] == (4 + 2 * 2) * 16 // 2  # sharded over the stage's group
        _assert_same((llm.score(PROMPTS[0]), llm.generate(PROMPTS, GREEDY)), want)
    finally:
        llm.close()


@pytest.mark.slow
def test_cli_pipeline_parallel_prints_one_output(tmp_path):
    make_llama(tmp_path / "ckpt", "gqa", num_hidden_layers=3)
    outs = cli_outputs(tmp_path / "ckpt", PROMPTS[:1], [], ["--pipeline-parallel-size", "2"])
    assert outs[1] == outs[0]


@pytest.mark.slow
def test_shared_dsa_layer_at_a_stage_start_is_refused(tmp_path):
    """GLM-5: layer 2 reuses layer 1's indexer top-k through the step's metadata; a stage starting there is refused
    (by rank 1, reported by rank 0); an indexer layer starting the stage runs and equals one process."""
    from tests.deepseek_fixtures import make_deepseek

    make_deepseek(tmp_path / "shared", "glm5_sparse", indexer_types=["full", "full", "shared"])
    with pytest.raises(RuntimeError, match="rank 1: ValueError: pipeline stage 1 starts at layer 2, whose DSA layer 2 "
                                           "shares the top-k"):
        LLM(tmp_path / "shared", dtype="float32", max_model_len=64, pipeline_parallel_size=2)
    assert not dist.is_initialized()
    make_deepseek(tmp_path / "full", "glm5_sparse", indexer_types=["full", "shared", "full"])
    want = _reference(tmp_path / "full")
    llm = LLM(tmp_path / "full", dtype="float32", max_model_len=64, pipeline_parallel_size=2)
    try:
        _assert_same((llm.score(PROMPTS[0]), llm.generate(PROMPTS, GREEDY)), want)
    finally:
        llm.close()


@pytest.mark.slow
def test_stages_sized_from_a_memory_budget_schedule_over_the_smallest_cache(tmp_path):
    """kv_cache_memory sizes each stage's cache for its own layers (stage 0: 2 layers, stage 1: 1): rank 0 schedules
    over stage 0's smaller block count, valid on both stages; tokens equal one process."""
    make_llama(tmp_path, "gqa", num_hidden_layers=3)
    per_layer_block = 2 * 2 * 16 * 16 * 4  # K and V x 2 kv heads x 16 tokens x head_dim 16 x fp32
    budget = 2 * per_layer_block * 20  # 20 blocks for stage 0's 2 layers, 40 for stage 1's one
    want = _reference(tmp_path)
    llm = LLM(tmp_path, dtype="float32", max_model_len=64, pipeline_parallel_size=2, kv_cache_memory=budget)
    try:
        assert llm.blocks.num_blocks == 20
        _assert_same((llm.score(PROMPTS[0]), llm.generate(PROMPTS, GREEDY)), want)
    finally:
        llm.close()


def test_rank_zero_block_manager_shrinks_to_the_smallest_rank():
    """Another rank holding fewer blocks (a GPU with less free memory): rank 0's empty manager is re-initialised to
    that count (a DP manager keeps a scratch block past it); once requests hold blocks it refuses."""
    from modelgen.runtime.block_manager import BlockManager
    from modelgen.runtime.parallel.attention_dp import DataParallelBlocks
    from modelgen.runtime.parallel.launch import _use_fewer_blocks

    blocks = BlockManager(12, 16)
    _use_fewer_blocks(blocks, 7)
    assert blocks.num_blocks == 7 and sorted(blocks.free) == list(range(7))
    dp = DataParallelBlocks(12, 16, 2)
    _use_fewer_blocks(dp, 7)
    assert dp.num_blocks == 7 and dp.scratch_block == 7 and all(m.num_blocks == 7 for m in dp.managers)
    blocks.ensure(0, 20)
    with pytest.raises(RuntimeError, match="only before any request is admitted"):
        _use_fewer_blocks(blocks, 5)
