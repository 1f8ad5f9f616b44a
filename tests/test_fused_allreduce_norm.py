"""Fused all-reduce + residual add + RMSNorm under tensor parallelism (issue 16 item 9): the op
``runtime/layers/all_reduce_norm.py::all_reduce_add_rms_norm`` equals the unfused sequence (all-reduce, add, RMSNorm) at
world size 2 (gloo, two CPU processes) in every RMSNorm convention, and a TP=2 model whose decoder layers hand o_proj's
all-reduce to ``post_attention_layernorm`` and each MLP's down_proj to the next norm (``fuse_all_reduce``, generated
into the plain pre-norm layouts) gives the logits and greedy tokens of world size 1. At world size 1 the op is exactly
``add_rms_norm`` and nothing is rewired.
"""
from __future__ import annotations

import json

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_file

from modelgen.runtime.layers.all_reduce_norm import all_reduce_add_rms_norm
from modelgen.runtime.ops import norm as ops

PROMPT = [1, 17, 42, 99, 3, 150, 64, 8]
VARIANTS = {  # name -> (zero_centred, weight_float32, with residual)
    "llama": (False, False, True),
    "zero_centred": (True, False, True),
    "weight_float32": (False, True, True),
    "first_layer": (False, False, False),
}


def _inputs(rank: int, dtype=torch.float32):
    """Rank ``rank``'s partial sum, and the residual / weight every rank shares."""
    part = torch.randn(5, 48, generator=torch.Generator().manual_seed(100 + rank)).to(dtype)
    shared = torch.Generator().manual_seed(7)
    residual = torch.randn(5, 48, generator=shared).to(dtype)
    weight = (torch.randn(48, generator=shared) * 0.3 + 1.0).to(dtype)
    return part, residual, weight


def _op_rank(rank: int, world: int, init_file: str, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        res = {}
        for name, (zc, f32, with_res) in VARIANTS.items():
            part, residual, weight = _inputs(rank)
            normed, new_res = all_reduce_add_rms_norm(part.clone(), residual if with_res else None, weight, 1e-6,
                                                          zero_centred=zc, weight_float32=f32)
            res[f"{name}.normed"], res[f"{name}.residual"] = normed.contiguous(), new_res.contiguous()
        save_file(res, f"{out}.rank{rank}.safetensors")
    finally:
        dist.destroy_process_group()


def test_op_equals_unfused_sequence_tp2(tmp_path):
    out = str(tmp_path / "op")
    mp.spawn(_op_rank, args=(2, str(tmp_path / "init"), out), nprocs=2)
    for name, (zc, f32, with_res) in VARIANTS.items():
        whole = _inputs(0)[0] + _inputs(1)[0]  # what the all-reduce forms (two addends: one order)
        _, residual, weight = _inputs(0)
        want_normed, want_res = ops.add_rms_norm(whole, residual if with_res else None, weight, 1e-6, zc, f32)
        for rank in range(2):
            got = load_file(f"{out}.rank{rank}.safetensors")
            assert torch.equal(got[f"{name}.residual"], want_res), name
            torch.testing.assert_close(got[f"{name}.normed"], want_normed, atol=1e-6, rtol=1e-6)
        # and the partial sum alone would be far off: the reduction happened
        alone, _ = ops.add_rms_norm(_inputs(0)[0], residual if with_res else None, weight, 1e-6, zc, f32)
        assert (alone - want_normed).abs().max() > 0.1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_op_is_add_rms_norm_at_world_size_1(dtype):
    part, residual, weight = _inputs(0, dtype)
    got = all_reduce_add_rms_norm(part, residual, weight, 1e-5)
    from modelgen.runtime.ops import gpu

    if gpu.enabled(part):  # the interpreter's GPU path: the same Triton launch RMSNorm runs there
        from modelgen.runtime.ops.gpu import norm as gpu_norm

        want = gpu_norm.add_rms_norm(part, residual, weight, 1e-5)
    else:
        want = ops.add_rms_norm(part, residual, weight, 1e-5)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_fuse_all_reduce_is_a_no_op_at_world_size_1():
    from modelgen.runtime.layers.linear import RowParallelLinear
    from modelgen.runtime.layers.norm import RMSNorm, fuse_all_reduce

    lin, norm = RowParallelLinear(16, 8, bias=False), RMSNorm(8, 1e-6)
    assert fuse_all_reduce(lin, norm) is False
    assert lin.reduce_results and not norm.reduce_input


def _model_rank(rank: int, world: int, init_file: str, checkpoint: str, out: str) -> None:
    import torch.distributed as dist

    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        llm = LLM(checkpoint, target="rocm", dtype="float32", max_model_len=64)
        layers = llm.model.model.layers
        fused = [not l.self_attn.o_proj.reduce_results and l.post_attention_layernorm.reduce_input for l in layers]
        # each MLP's down_proj reduced by the norm after it: the next layer's input norm, the final norm last
        nexts = [l.input_layernorm for l in layers[1:]] + [llm.model.model.norm]
        fused += [not l.mlp.down_proj.reduce_results and n.reduce_input for l, n in zip(layers, nexts)]
        fused.append(not layers[0].input_layernorm.reduce_input)  # the embedding output is whole
        logits = llm.score(PROMPT).contiguous()
        tokens = llm.generate([PROMPT], SamplingParams(max_new_tokens=8, ignore_eos=True))[0]
        save_file({"logits": logits}, f"{out}.rank{rank}.safetensors")
        with open(f"{out}.rank{rank}.json", "w") as f:
            json.dump({"tokens": tokens, "fused": fused}, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("case", ["llama", "qwen3"])
def test_tp2_model_with_fused_norm_matches_tp1(tmp_path, case):
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams

    ckpt = tmp_path / "ckpt"
    if case == "llama":
        from tests.llama_fixtures import make_llama

        make_llama(ckpt, "gqa")
    else:
        from tests.test_gpu_qk_norm_rope import _qwen3_checkpoint

        _qwen3_checkpoint(ckpt)
    single = LLM(ckpt, target="rocm", dtype="float32", max_model_len=64)
    assert not any(l.post_attention_layernorm.reduce_input for l in single.model.model.layers)
    want = single.score(PROMPT)
    want_tokens = single.generate([PROMPT], SamplingParams(max_new_tokens=8, ignore_eos=True))[0]
    out = str(tmp_path / "result")
    mp.spawn(_model_rank, args=(2, str(tmp_path / "init"), str(ckpt), out), nprocs=2)
    for rank in range(2):
        torch.testing.assert_close(load_file(f"{out}.rank{rank}.safetensors")["logits"], want, atol=1e-4, rtol=1e-4)
        meta = json.loads(open(f"{out}.rank{rank}.json").read())
        assert meta["fused"] and all(meta["fused"])  # every layer took the fused op
        assert meta["tokens"] == want_tokens


@pytest.mark.skipif(not __import__("tests.gpu_helpers").gpu_helpers.INTERPRET and not torch.cuda.is_available(),
                    reason="needs a CUDA GPU, or TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1 (Triton's interpreter)")
def test_op_takes_the_fused_triton_kernel_on_the_gpu_path(monkeypatch):
    """On the GPU path the step after the reduction is the one fused add + RMSNorm Triton launch (not add, then norm),
    and it equals the torch reference."""
    from modelgen.runtime.ops.gpu import norm as gpu_norm
    from tests.gpu_helpers import DEV, rel

    calls = []
    real = gpu_norm.add_rms_norm
    monkeypatch.setattr(gpu_norm, "add_rms_norm", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    part, residual, weight = (t.to(DEV) for t in _inputs(0))
    got = all_reduce_add_rms_norm(part, residual, weight, 1e-6)
    want = ops.add_rms_norm(part, residual, weight, 1e-6)
    assert calls == [1]
    assert rel(got[0], want[0]) < 1e-5 and torch.equal(got[1], want[1])
