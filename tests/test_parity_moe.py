"""test_against_hf_{qwen3,qwen3_moe,mixtral,glm4_moe}: generated models vs transformers, both targets, checkpoints in
the per-expert (save_pretrained default) and fused (save_original_format=False) formats.

Same gates as the Llama parity tests: fp32 prefill logits within 1e-4 and 16 greedy tokens equal; three-way bf16
(HF fp32 gold, HF bf16 floor, modelgen bf16 within 2x the floor's error + 1e-2 for router near-ties; assert_close_three_way).
"""
from __future__ import annotations

import copy

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.testing import assert_close_three_way
from tests.moe_fixtures import CASES, make_moe
from tests.test_parity_llama import PROMPT, THREE_WAY_FACTOR, hf_greedy, hf_logits

TARGETS = ["rocm", "neuron"]
MOE_THREE_WAY_ATOL = 1e-2


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    cache: dict = {}

    def get(name: str, fused: bool):
        if (name, fused) not in cache:
            d = tmp_path_factory.mktemp(f"{name}_{'fused' if fused else 'per_expert'}")
            cache[name, fused] = (d, make_moe(d, name, fused))
        return cache[name, fused]

    return get


# Dense Qwen3 has no expert tensors, so only its default format is tested.
FORMATS = [(n, f) for n in CASES for f in (False, True) if not (n == "qwen3" and f)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, fused", FORMATS, ids=[f"{n}-{'fused' if f else 'per_expert'}" for n, f in FORMATS])
def test_against_hf_fp32(checkpoints, name, target, fused):
    path, hf = checkpoints(name, fused)
    llm = LLM(path, target=target, dtype="float32", max_model_len=128)
    err = (llm.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < 1e-4, f"{name}/{target}: prefill logits differ by {err}"
    out = llm.generate([PROMPT], SamplingParams(max_new_tokens=16, ignore_eos=True))[0]
    assert out == hf_greedy(hf, PROMPT, 16)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(CASES))
def test_against_hf_bf16_three_way(checkpoints, name, target):
    path, hf = checkpoints(name, False)
    gold = hf_logits(hf, PROMPT)
    floor = hf_logits(copy.deepcopy(hf).to(torch.bfloat16), PROMPT)
    ours = LLM(path, target=target, dtype="bfloat16", max_model_len=128).score(PROMPT).float()
    # MoE keeps a 1e-2 slack: bf16 router near-ties (two logits ~2 bf16 steps apart) may legitimately pick another
    # expert than HF bf16 does on some machine (measured here: ours/floor <= 1.38 with 1e-3).
    assert_close_three_way(gold, floor, ours, factor=THREE_WAY_FACTOR, atol=MOE_THREE_WAY_ATOL, name=f"{name}/{target}")


def test_dense_sparse_schedule_is_the_declared_rule(checkpoints):
    from modelgen.runtime.layers.moe import FusedMoE

    kinds = {}
    for name in ("qwen3_moe_norm", "qwen3_moe_nonorm", "glm4_moe_plain"):
        path, hf = checkpoints(name, False)
        llm = LLM(path, target="rocm", dtype="float32", max_model_len=64)
        ours = [isinstance(getattr(layer.mlp, "experts", None), FusedMoE) for layer in llm.model.model.layers]
        theirs = [hasattr(layer.mlp, "experts") for layer in hf.model.layers]
        assert ours == theirs
        kinds[name] = ours
    assert kinds == {
        "qwen3_moe_norm": [True, False, True],  # mlp_only_layers=[1]
        "qwen3_moe_nonorm": [False, True, False],  # decoder_sparse_step=2
        "glm4_moe_plain": [False, False, True],  # first_k_dense_replace=2
    }


@pytest.mark.parametrize("threads", ["1", "16"])
def test_expert_staging_paths_load_identically(checkpoints, monkeypatch, threads):
    path, hf = checkpoints("qwen3_moe_norm", False)
    monkeypatch.setenv("MODELGEN_LOADER_NUM_THREADS", threads)
    llm = LLM(path, target="rocm", dtype="float32", max_model_len=64)
    w13 = llm.model.model.layers[0].mlp.experts.w13_weight
    ref = hf.model.layers[0].mlp.experts.gate_up_proj
    assert torch.equal(w13, ref)


@pytest.mark.parametrize("threads", ["1", "16"])
def test_missing_expert_is_named(tmp_path, monkeypatch, threads):
    from safetensors.torch import load_file, save_file

    from modelgen.runtime.loader.checkpoint import CheckpointError

    make_moe(tmp_path, "mixtral", fused=False)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["model.layers.2.block_sparse_moe.experts.3.w3.weight"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    monkeypatch.setenv("MODELGEN_LOADER_NUM_THREADS", threads)
    with pytest.raises(CheckpointError) as e:
        LLM(tmp_path, target="rocm", dtype="float32")
    msg = str(e.value)
    assert "model.layers.2.mlp.experts.w13_weight" in msg
    if threads == "16":
        assert "experts [3] missing shard 'w3'" in msg
    with pytest.raises(CheckpointError, match=r"missing[\s\S]*model.layers.2.mlp.experts_w13_weight"):
        LLM(tmp_path, target="neuron", dtype="float32")


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["qwen3_moe_norm", "glm4_moe_qknorm", "mixtral"])
def test_expert_parallel_world_size_2_matches_world_size_1(tmp_path, name, target):
    """Each of 2 gloo ranks owns half the experts (and half the attention heads); logits equal world size 1."""
    import torch.multiprocessing as mp
    from safetensors.torch import load_file

    from tests.tp_worker import run_rank

    make_moe(tmp_path / "ckpt", name, fused=(name == "mixtral"))
    want = LLM(tmp_path / "ckpt", target=target, dtype="float32", max_model_len=64).score(PROMPT[:8])
    out = str(tmp_path / "result")
    mp.spawn(run_rank, args=(2, str(tmp_path / "init"), str(tmp_path / "ckpt"), target, PROMPT[:8], out), nprocs=2)
    for rank in range(2):
        torch.testing.assert_close(load_file(f"{out}.rank{rank}.safetensors")["logits"], want, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_neuron_moe_buckets_trace_fullgraph(checkpoints):
    """The shape-static MoE path traces like the dense one; no recompiles after warm-up."""
    torch._dynamo.reset()
    path, hf = checkpoints("glm4_moe_qknorm", False)
    kwargs = dict(target="neuron", dtype="float32", max_model_len=64, block_size=8, max_num_seqs=2,
                  prefill_buckets=[32], decode_buckets=[1, 2])
    llm = LLM(path, compile=True, **kwargs)
    llm.runner.warmup()
    params = SamplingParams(max_new_tokens=5, ignore_eos=True)
    torch.compiler.set_stance("fail_on_recompile")
    try:
        got = llm.generate([PROMPT, PROMPT[:5]], params)
    finally:
        torch.compiler.set_stance("default")
    assert got == LLM(path, **kwargs).generate([PROMPT, PROMPT[:5]], params)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["qwen3", "qwen3_moe_norm", "mixtral", "glm4_moe_qknorm"])
def test_modelgen_run_cli(checkpoints, name, target):
    import json
    import subprocess
    import sys

    path, hf = checkpoints(name, False)
    r = subprocess.run(
        [sys.executable, "-m", "modelgen.cli", "run", "--checkpoint", str(path), "--target", target, "--prompt-ids",
         ",".join(map(str, PROMPT)), "--prompt-ids", "1,2,3", "--max-new-tokens", "6", "--ignore-eos", "--json",
         "--dtype", "float32"],
        capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["spec"] == f"specs/{name.split('_moe')[0] + ('_moe' if '_moe' in name else '')}.yaml"
    assert [o["token_ids"] for o in result["outputs"]] == [hf_greedy(hf, PROMPT, 6), hf_greedy(hf, [1, 2, 3], 6)]


def test_glm4_shared_experts_fused_as_expert_slots(tmp_path):
    """rocm: GLM4's shared experts (spec `fuse: true`) are extra slots of the fused MoE op, split from the shared
    MLP's tensors (n_shared_experts=2 -> 2 slots); a missing shared tensor is reported."""
    from safetensors.torch import load_file, save_file

    from modelgen.runtime.loader.checkpoint import CheckpointError

    hf = make_moe(tmp_path, "glm4_moe_plain")  # 4 routed experts, 2 shared, first 2 layers dense
    llm = LLM(tmp_path, target="rocm", dtype="float32", max_model_len=64)
    moe = llm.model.model.layers[2].mlp
    assert not hasattr(moe, "shared_experts") and moe.experts.w13_weight.shape[0] == 4 + 2
    shared = hf.model.layers[2].mlp.shared_experts
    assert torch.equal(moe.experts.w13_weight[4:, :32], shared.gate_proj.weight.view(2, 32, -1))
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["model.layers.2.mlp.shared_experts.up_proj.weight"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"missing[\s\S]*model.layers.2.mlp.experts.w13_weight \(shard 'shared_w3'\)"):
        LLM(tmp_path, target="rocm", dtype="float32")
