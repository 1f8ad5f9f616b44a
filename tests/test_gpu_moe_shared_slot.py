"""Qwen3-Next's sigmoid-gated shared expert as slot E of the fused MoE kernels (``runtime/layers/moe/shared_slot.py``):
the route kernel's extra column against torch, the folded MoE block against the unfolded one (the same module, the
switch ``SHARED_SLOT`` off), and the fold refused where its rules say so. Runs on a GPU or in Triton's interpreter
(``TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1``; float16 stands for bfloat16 there, see tests/gpu_helpers.py).
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.gpu_helpers import DEV, INTERPRET, KERNEL_MARKS, LOW, count_calls, cuda_only

pytestmark = KERNEL_MARKS


def _ulp(x: torch.Tensor) -> torch.Tensor:
    """One unit in the last place of each element of ``x`` in its dtype."""
    return (torch.nextafter(x.abs(), torch.tensor(float("inf"), dtype=x.dtype, device=x.device)) - x.abs()).float()


@pytest.mark.parametrize("T", [1, 3, 8, 33])
@pytest.mark.parametrize("dtype", [LOW, torch.float32])
@pytest.mark.parametrize("E,k", [(8, 2), (64, 8)])
def test_route_shared_gate_column(T, dtype, E, k):
    from modelgen.runtime.layers.moe import kernels as gm

    g = torch.Generator(device=DEV).manual_seed(T * 100 + E)
    logits = (torch.randn(T, E + 1, device=DEV, generator=g) * 3).to(dtype)
    w, ids = gm.route(logits, k, scoring="softmax", renormalize=True, out_dtype=dtype, shared_gate=True)
    w0, ids0 = gm.route(logits[:, :E].contiguous(), k, scoring="softmax", renormalize=True, out_dtype=dtype)
    assert w.shape == (T, k + 1) and ids.shape == (T, k + 1)
    # Routing over the first E logits is the unfolded route, bit for bit (the same code on the same values).
    assert torch.equal(ids[:, :k], ids0) and torch.equal(w[:, :k], w0)
    assert (ids[:, k] == E).all()
    want = torch.sigmoid(logits[:, E])  # HF: F.sigmoid(shared_expert_gate(x)) in the model dtype
    err = (w[:, k].float() - want.float()).abs()
    if dtype == torch.float32:
        assert err.max().item() <= 1e-6
    else:  # within one rounding of the model dtype
        assert (err <= _ulp(want)).all(), err.max().item()


def _block(E: int, H: int, I: int, shared_I: int, dtype, seed: int):
    """The generated Qwen3-Next MoE block on a small config, random weights, post-load hook run (as the loaders do)."""
    from modelgen.generated.rocm.qwen3_next.model import Qwen3NextSparseMoeBlock

    cfg = SimpleNamespace(hidden_size=H, num_experts=E, num_experts_per_tok=4, norm_topk_prob=True,
                          moe_intermediate_size=I, shared_expert_intermediate_size=shared_I)
    block = Qwen3NextSparseMoeBlock(cfg).to(device=DEV, dtype=dtype)
    g = torch.Generator(device=DEV).manual_seed(seed)
    with torch.no_grad():
        for name, p in block.named_parameters():
            fan_in = p.shape[-1]
            p.copy_((torch.randn(p.shape, device=DEV, generator=g) * fan_in ** -0.5).to(dtype))
    block.process_weights_after_loading()
    return block


# The pair (small-batch) path's down kernel does not run in Triton 3.6's interpreter ('mask has unsupported dtype'
# in _down_pairs_kernel; tests/test_gpu_moe.py::test_shared_expert_slots fails the same way on main): GPU only there.
PATHS = ["sorted", pytest.param("pairs", marks=pytest.mark.skipif(
    INTERPRET and not torch.cuda.is_available(), reason="_down_pairs_kernel fails in the Triton interpreter"))]


@pytest.mark.parametrize("T", [1, 3, 8])
@pytest.mark.parametrize("dtype", [LOW, torch.float32])
@pytest.mark.parametrize("path", PATHS)
def test_folded_block_matches_unfolded(T, dtype, path, monkeypatch):
    from modelgen.runtime.layers.moe import kernels as gm
    from modelgen.runtime.layers.moe import shared_slot

    monkeypatch.setenv("MODELGEN_MOE", path)  # both expert paths see the k + 1 columns

    E, H, I = 16, 64, 32
    block = _block(E, H, I, I, dtype, seed=T)
    assert block.experts.shared_slot
    # Held once: the shared MLP's and the gate's weights are views into slot E / router row E.
    assert block.shared_expert.gate_up_proj.weight.data_ptr() == block.experts.w13_slots[E].data_ptr()
    assert block.shared_expert.down_proj.weight.data_ptr() == block.experts.w2_slots[E].data_ptr()
    assert block.shared_expert_gate.weight.data_ptr() == block.gate.weight_with_gate[E].data_ptr()
    assert block.experts.w13_weight.data_ptr() == block.experts.w13_slots.data_ptr()
    x = torch.randn(T, H, device=DEV, generator=torch.Generator(device=DEV).manual_seed(7)).to(dtype)

    calls = []
    fused = gm.fused_moe
    monkeypatch.setattr(gm, "fused_moe", lambda *a, **kw: calls.append(a[3].shape[1]) or fused(*a, **kw))
    monkeypatch.setattr(shared_slot, "SHARED_SLOT", True)
    assert shared_slot.active(block.gate, block.experts, x)
    folded = block(x)
    assert calls == [block.gate.top_k + 1]  # one fused call over k + 1 columns: the shared expert is a slot
    monkeypatch.setattr(shared_slot, "SHARED_SLOT", False)
    calls.clear()
    unfolded = block(x)
    assert calls == [block.gate.top_k]
    assert folded.dtype == unfolded.dtype == dtype
    scale = unfolded.float().abs().max()
    err = (folded.float() - unfolded.float()).abs().max()
    if dtype == torch.float32:
        assert err <= 1e-5 * scale, (err, scale)
    else:  # the fold rounds the gated shared output once less (summed in fp32 with the routed ones)
        assert err <= 2 * torch.finfo(dtype).eps * scale, (err, scale)


def test_fold_refused_for_a_wider_shared_expert(monkeypatch):
    """Qwen2-MoE's shared expert is 4x the experts' width: not foldable into one slot, the block keeps its MLP."""
    from modelgen.runtime.layers.moe import shared_slot

    monkeypatch.setenv("MODELGEN_MOE", "sorted")  # the pair path does not run in the interpreter (PATHS above)

    block = _block(8, 64, 32, 128, torch.float32, seed=1)
    assert not getattr(block.experts, "shared_slot", False)
    x = torch.randn(2, 64, device=DEV)
    assert not shared_slot.active(block.gate, block.experts, x)
    calls = []
    mlp = block.shared_expert.forward
    monkeypatch.setattr(block.shared_expert, "forward", lambda t: calls.append(1) or mlp(t))
    assert block(x).shape == (2, 64) and calls == [1]  # the separate shared MLP ran


def test_fold_off_the_gpu_path_keeps_the_unfolded_forward(monkeypatch):
    """Folded weights, but no Triton for this input (the CPU torch path): the unfolded forward, the same values."""
    from modelgen.runtime.layers.moe import shared_slot

    block = _block(8, 64, 32, 32, torch.float32, seed=2)
    x = torch.randn(2, 64, device=DEV)
    monkeypatch.setattr(shared_slot.gpu, "enabled", lambda t: False)
    assert not shared_slot.active(block.gate, block.experts, x)
    # A later copy of the parameters (``.to()``) breaks the views: the fold is then no longer taken.
    monkeypatch.undo()
    block.experts.w13_weight.data = block.experts.w13_weight.data.clone()
    assert not shared_slot.active(block.gate, block.experts, x)


@cuda_only
@pytest.mark.parametrize("on", [True, False])
def test_engine_folded_qwen3_next_matches_transformers(tmp_path, monkeypatch, on):
    """The whole generated Qwen3-Next on the GPU with its shared experts folded (shared width == the experts'): fp32
    prefill logits and 16 greedy tokens of the graphed decode equal transformers with the switch on (the folded
    forward ran, inside the captured graphs) and off (the same folded weights through the unfolded forward)."""
    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams
    from modelgen.runtime.layers.moe import shared_slot
    from tests.parity_helpers import hf_greedy_forward, hf_logits
    from tests.qwen3_next_fixtures import make_qwen3_next
    from tests.test_gpu_gdn import PROMPT, _hf_torch_paths
    from tests.test_parity_llama import PREFILL_ATOL

    monkeypatch.setattr(shared_slot, "SHARED_SLOT", on)
    folded_calls = count_calls(monkeypatch, shared_slot, "forward")
    _hf_torch_paths(monkeypatch)
    hf = make_qwen3_next(tmp_path, "qwen3_next_shared_slot")
    llm = LLM(tmp_path, target="rocm", dtype="float32", device="cuda", max_model_len=256, max_num_seqs=4)
    assert llm.backend == "triton"
    folded = [m for m in llm.model.modules() if getattr(m, "shared_slot", False)]
    assert len(folded) == hf.config.num_hidden_layers  # every MoE layer folded at load, whatever the switch
    assert (llm.score(PROMPT).float().cpu() - hf_logits(hf, PROMPT)).abs().max().item() < PREFILL_ATOL
    params = SamplingParams(max_new_tokens=16, ignore_eos=True)
    assert llm.generate([PROMPT], params)[0] == hf_greedy_forward(hf, PROMPT, 16)
    if on:
        assert folded_calls["captured"] > 0
    else:
        assert folded_calls["calls"] == 0
