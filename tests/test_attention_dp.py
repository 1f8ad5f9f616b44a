"""Attention data parallelism (rocm, gloo on CPU): ``LLM(..., data_parallel_size=2)`` places each request on one
rank (its own KV cache), runs attention there and the MoE / MLP layers over both ranks; every request's greedy
tokens equal one rank, logits within 1e-4 (fp32)."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from modelgen.runtime.block_manager import CacheFullError
from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.parallel.attention_dp import DataParallelBlocks
from tests.llama_fixtures import make_llama
from tests.moe_fixtures import make_moe
from tests.parallel_helpers import cli_outputs, record_receives

PROMPTS = [[1, 17, 42, 99, 3, 150, 64, 8, 9], [5, 6, 7, 120, 33], [9, 10], [44, 45, 46, 47]]
GREEDY = SamplingParams(max_new_tokens=6, ignore_eos=True)


def test_requests_go_to_the_least_loaded_rank():
    blocks = DataParallelBlocks(num_blocks=5, block_size=4, dp=2)  # 4 usable blocks per rank + 1 scratch
    assert blocks.num_blocks == 4 and blocks.scratch_block == 4
    blocks.ensure(0, 9)  # 3 blocks on rank 0
    blocks.ensure(1, 2)  # rank 1 has more free blocks
    blocks.ensure(2, 4)  # rank 0: 1 free, rank 1: 3 free -> rank 1
    assert blocks.owner == {0: 0, 1: 1, 2: 1}
    assert blocks.tables[0] == [0, 1, 2] and blocks.tables[1] == [0] and blocks.tables[2] == [1]  # per-rank ids
    blocks.ensure(1, 5)  # grows on its own rank, in place
    assert blocks.owner[1] == 1 and blocks.tables[1] == [0, 2]
    assert blocks.can_allocate(3, 4) and not blocks.can_allocate(3, 9)  # 1 free block on each rank
    with pytest.raises(CacheFullError, match="no data-parallel rank has 3 free block"):
        blocks.ensure(3, 9)
    blocks.release(0)
    assert 0 not in blocks.owner and 0 not in blocks.tables and blocks.num_free == 4 + 1
    blocks.ensure(3, 9)  # now fits on rank 0 again
    assert blocks.owner[3] == 0


def test_sizes_are_checked(tmp_path):
    make_llama(tmp_path, "gqa")
    with pytest.raises(ValueError, match="data_parallel_size 2 with pipeline_parallel_size 2 is not supported"):
        LLM(tmp_path, data_parallel_size=2, pipeline_parallel_size=2)
    with pytest.raises(ValueError, match="leave expert_parallel_size unset"):
        LLM(tmp_path, data_parallel_size=2, expert_parallel_size=2)
    with pytest.raises(ValueError, match="implemented for the rocm target, not neuron"):
        LLM(tmp_path, target="neuron", data_parallel_size=2)
    assert not dist.is_initialized()


@pytest.mark.slow
@pytest.mark.parametrize("case", ["qwen3_moe", "glm4_moe", "llama", "deepseek_v3", "qwen3_next"])
def test_attention_data_parallel_2_equals_1(tmp_path, case, monkeypatch):
    if case == "qwen3_moe":  # 8 experts (4 per rank) and a dense layer 1 (mlp_only_layers)
        make_moe(tmp_path, "qwen3_moe_norm")
    elif case == "deepseek_v3":  # MLA: each rank its own latent cache (ATOM's DP attention target)
        from tests.deepseek_fixtures import make_deepseek

        make_deepseek(tmp_path, "v3")
    elif case == "qwen3_next":  # Gated DeltaNet state slots: an idle rank's dummy token borrows another rank's slot
        from tests.qwen3_next_fixtures import make_qwen3_next

        make_qwen3_next(tmp_path, "qwen3_next")
    elif case == "glm4_moe":  # 8 experts + a shared expert as extra fused-MoE slots (run once: rank 0's), dense layer 0
        make_moe(tmp_path, "glm4_moe_qknorm")
    else:
        make_llama(tmp_path, "gqa")
    one = LLM(tmp_path, dtype="float32", max_model_len=64)
    want_logits = one.score(PROMPTS[0])
    want = one.generate(PROMPTS, GREEDY)
    placed = {}
    release = DataParallelBlocks.release

    def recording_release(self, seq_id):
        if seq_id in self.owner:
            placed[seq_id] = self.owner[seq_id]
        release(self, seq_id)

    monkeypatch.setattr(DataParallelBlocks, "release", recording_release)
    llm = LLM(tmp_path, dtype="float32", max_model_len=64, data_parallel_size=2)
    try:
        assert dist.get_world_size() == 2
        params = dict(llm.model.named_parameters())
        if case not in ("deepseek_v3", "qwen3_next"):
            qkv = next(p for n, p in params.items() if n.endswith("layers.0.self_attn.qkv_proj.weight"))
            assert qkv.shape[0] == (4 + 2 * 2) * 16  # attention whole on each rank
            gate_up = next(p for n, p in params.items() if n.endswith("mlp.gate_up_proj.weight"))
            assert gate_up.shape[0] == 2 * 96 // 2  # dense MLP sharded over the 2 ranks
        if case != "llama":
            experts = next(m for m in llm.model.modules() if getattr(m, "is_fused_moe", False))
            assert experts.num_local_experts * 2 == experts.num_experts  # experts spread over the ranks
        # one request: rank 1 idles on its scratch block but joins every MoE/MLP collective
        torch.testing.assert_close(llm.score(PROMPTS[0]), want_logits, atol=1e-4, rtol=1e-4)
        placed.clear()
        received = record_receives(monkeypatch)
        assert llm.generate(PROMPTS, GREEDY) == want
        assert received and all(dtype == torch.int64 and len(shape) == 1 for dtype, shape in received)  # ids only
        assert sorted(placed.values()) == [0, 0, 1, 1]  # the four requests spread over both ranks
    finally:
        llm.close()
    assert not dist.is_initialized()


@pytest.mark.slow
def test_cli_data_parallel_prints_one_output(tmp_path):
    make_moe(tmp_path / "ckpt", "qwen3_moe_norm")
    outs = cli_outputs(tmp_path / "ckpt", PROMPTS[:2], [], ["--data-parallel-size", "2"])
    assert outs[1] == outs[0]


@pytest.mark.slow
@pytest.mark.parametrize("case", ["qwen3_moe", "llama"])
def test_attention_dp_groups_with_tensor_parallel_attention(tmp_path, case):
    """D = 2 groups x T = 2: attention TP-sharded inside each group (its o_proj all-reduce fused into the norm over
    the group), the MoE / dense MLP over all 4 ranks (their down projection reduced over the world; Llama's model
    fuses it into the next norm, which would sum over the group only)."""
    if case == "llama":
        make_llama(tmp_path, "gqa")
    else:
        make_moe(tmp_path, "qwen3_moe_norm")
    one = LLM(tmp_path, dtype="float32", max_model_len=64)
    want_logits, want = one.score(PROMPTS[0]), one.generate(PROMPTS, GREEDY)
    llm = LLM(tmp_path, dtype="float32", max_model_len=64, data_parallel_size=2, tensor_parallel_size=2)
    try:
        assert dist.get_world_size() == 4
        params = dict(llm.model.named_parameters())
        qkv = next(p for n, p in params.items() if n.endswith("layers.0.self_attn.qkv_proj.weight"))
        assert qkv.shape[0] == (4 + 2 * 2) * 16 // 2  # attention sharded over the group's 2 ranks
        gate_up = next(p for n, p in params.items() if n.endswith("mlp.gate_up_proj.weight"))
        assert gate_up.shape[0] == 2 * 96 // 4  # dense MLP over all 4 ranks
        if case == "qwen3_moe":
            experts = next(m for m in llm.model.modules() if getattr(m, "is_fused_moe", False))
            assert experts.num_local_experts == 2
        torch.testing.assert_close(llm.score(PROMPTS[0]), want_logits, atol=1e-4, rtol=1e-4)
        assert llm.generate(PROMPTS, GREEDY) == want
    finally:
        llm.close()
    assert not dist.is_initialized()
