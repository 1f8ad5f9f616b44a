"""MXFP4 checkpoints (runtime/loader/mxfp4.py): dequantization bit-equal to transformers', the checkpoint view, and a
tiny GPT-OSS whose experts this test quantizes itself, run by modelgen (both targets) against transformers loading the
same MXFP4 checkpoint (transformers dequantizes it on CPU)."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.engine.sampler import SamplingParams
from modelgen.runtime.loader import quantization
from modelgen.runtime.loader.checkpoint import Checkpoint, CheckpointError
from modelgen.runtime.loader.mxfp4 import Mxfp4DequantCheckpoint, dequantize_checkpoint_dir
from modelgen.runtime.ops.mxfp4 import dequantize_mxfp4, quantize_mxfp4
from tests.gpt_oss_fixtures import PROMPT, make_gpt_oss
from tests.test_parity_llama import hf_greedy, hf_logits

QUANTIZED = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dequantize_is_bit_equal_to_transformers(dtype):
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    g = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, 256, (3, 40, 2, 16), generator=g, dtype=torch.uint8)
    scales = torch.randint(117, 137, (3, 40, 2), generator=g, dtype=torch.uint8)
    ours = dequantize_mxfp4(blocks, scales, dtype)
    assert ours.shape == (3, 64, 40) and ours.dtype == dtype
    assert torch.equal(ours, convert_moe_packed_tensors(blocks, scales, dtype=dtype))


def test_quantize_round_trip():
    w = torch.randn(2, 64, 48, generator=torch.Generator().manual_seed(1)) * 3
    blocks, scales = quantize_mxfp4(w)
    assert blocks.shape == (2, 48, 2, 16) and scales.shape == (2, 48, 2)
    back = dequantize_mxfp4(blocks, scales, torch.float32)
    # nearest E2M1 value: the error is at most half the widest gap (2, between 4 and 6) times the group's scale
    step = torch.pow(2.0, scales.float() - 127).repeat_interleave(32, dim=-1).transpose(1, 2)
    assert ((back - w).abs() <= step + 1e-7).all()
    assert (back - w).abs().max() > 0  # a real quantization, not a copy
    # values already on the grid come back exactly
    assert torch.equal(dequantize_mxfp4(*quantize_mxfp4(back), torch.float32), back)


def _write_mxfp4(src, dst) -> None:
    """The fused expert tensors of a bf16/fp32 GPT-OSS checkpoint as *_blocks / *_scales, quantization_config mxfp4
    (modules_to_not_convert as in the released gpt-oss checkpoints)."""
    tensors = {}
    for k, v in load_file(str(src / "model.safetensors")).items():
        if k.endswith(QUANTIZED):
            tensors[k + "_blocks"], tensors[k + "_scales"] = quantize_mxfp4(v)
        else:
            tensors[k] = v
    dst.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                   "lm_head"],
    }
    (dst / "config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module")
def mxfp4_checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("mxfp4")
    bf = make_gpt_oss(root / "plain", intermediate_size=32)  # the expert widths must be multiples of 32
    _write_mxfp4(root / "plain", root / "mxfp4")
    return root, bf


def test_view_presents_dequantized_tensors(mxfp4_checkpoint):
    root, _ = mxfp4_checkpoint
    with Checkpoint(root / "mxfp4") as inner:
        view = Mxfp4DequantCheckpoint(inner, torch.float32)
        name = "model.layers.1.mlp.experts.gate_up_proj"
        assert name in view and name + "_blocks" not in view.keys() and name + "_scales" not in view.keys()
        assert sorted(view.keys()) == sorted(load_file(str(root / "plain" / "model.safetensors")))
        assert view.shape(name) == (4, 64, 64) and view.dtype(name) == torch.float32
        t = view.get_tensor(name)
        assert t.shape == view.shape(name)
        assert torch.equal(view.get_slice(name)[1:3], t[1:3])  # neuron's closure loaders read lazy slices
        assert view.shape("model.layers.1.mlp.experts.down_proj") == (4, 32, 64)


def test_view_names_broken_pairs(tmp_path):
    blocks = torch.zeros(2, 8, 2, 16, dtype=torch.uint8)
    cases = {
        "lone_blocks": {"x.gate_up_proj_blocks": blocks},
        "lone_scales": {"x.gate_up_proj_scales": torch.zeros(2, 8, 2, dtype=torch.uint8)},
        "shapes": {"x.gate_up_proj_blocks": blocks, "x.gate_up_proj_scales": torch.zeros(2, 8, 3, dtype=torch.uint8)},
    }
    for case, tensors in cases.items():
        d = tmp_path / case
        d.mkdir()
        save_file(tensors, str(d / "model.safetensors"))
        with Checkpoint(d) as inner, pytest.raises(CheckpointError, match="x.gate_up_proj_"):
            Mxfp4DequantCheckpoint(inner, torch.bfloat16)


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_mxfp4_gpt_oss_matches_transformers(mxfp4_checkpoint, target):
    """transformers loads the MXFP4 checkpoint (dequantizing it itself); modelgen runs the checkpoint dequantized by
    runtime/loader/mxfp4.py: fp32 logits within 1e-4, 16 greedy tokens equal."""
    import transformers

    root, plain_hf = mxfp4_checkpoint
    hf = transformers.GptOssForCausalLM.from_pretrained(root / "mxfp4", dtype=torch.float32).eval()
    ref = hf_logits(hf, PROMPT)
    # the quantization is visible: the unquantized model's logits are elsewhere
    assert (hf_logits(plain_hf, PROMPT) - ref).abs().max() > 1e-3
    converted = dequantize_checkpoint_dir(root / "mxfp4", root / f"dequantized_{target}", torch.float32)
    assert converted == sorted(f"model.layers.{i}.{q}" for i in range(3) for q in QUANTIZED)
    llm = LLM(root / f"dequantized_{target}", target=target, dtype="float32", max_model_len=128)
    err = (llm.score(PROMPT).float() - ref).abs().max().item()
    assert err < 1e-4, f"{target}: MXFP4 logits differ from transformers by {err}"
    assert llm.generate([PROMPT], SamplingParams(max_new_tokens=16, ignore_eos=True))[0] == hf_greedy(hf, PROMPT, 16)


@pytest.mark.skipif("mxfp4" not in quantization.SUPPORTED_METHODS, reason="mxfp4 not registered")
def test_engine_loads_mxfp4_directly(mxfp4_checkpoint):
    import transformers

    root, _ = mxfp4_checkpoint
    hf = transformers.GptOssForCausalLM.from_pretrained(root / "mxfp4", dtype=torch.float32).eval()
    llm = LLM(root / "mxfp4", target="rocm", dtype="float32", max_model_len=128)
    assert (llm.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item() < 1e-4


@pytest.mark.parametrize("tp_rank,tp_size,offset,local", [(0, 1, 0, 4), (1, 2, 0, 4), (0, 1, 2, 2), (1, 2, 2, 2)])
def test_kept_mxfp4_experts_slice_like_the_bf16_loader(tp_rank, tp_size, offset, local):
    """MXFP4 experts kept packed (runtime/layers/moe/mxfp4.py) load this rank's experts and intermediate slice: the
    kept blocks, dequantized and put in the stacked layout, equal what the bf16 FusedMoE loader keeps from the
    dequantized checkpoint (expert ranges and TP-sharded experts, simulated rank by rank)."""
    from modelgen.runtime import distributed as dist
    from modelgen.runtime.layers.moe import FusedMoE
    from modelgen.runtime.layers.moe.mxfp4 import keep_mxfp4
    from modelgen.runtime.layers.moe.ops import stacked_from_fused

    E, H, I = 4, 64, 64
    g = torch.Generator().manual_seed(tp_rank + offset)
    gate_up, down = torch.randn(E, H, 2 * I, generator=g), torch.randn(E, I, H, generator=g)
    (b13, s13), (b2, s2) = quantize_mxfp4(gate_up), quantize_mxfp4(down)

    def layer():
        m = FusedMoE(E, H, I, activation="clamped_swiglu", activation_params={"alpha": 1.702, "limit": 7.0},
                     bias=True, fused_layout="interleaved_transposed")
        m.expert_offset, m.num_local_experts = offset, local  # this rank's experts, as moe_layout would give
        m.moe_tp_rank, m.moe_tp_size, m.intermediate_size = tp_rank, tp_size, I // tp_size
        m.w13_weight.data = m.w13_weight.data[:local, : 2 * I // tp_size]
        m.w2_weight.data = m.w2_weight.data[:local, :, : I // tp_size]
        return m

    bf16 = layer()
    bf16.weight_loader(bf16.w13_weight, dequantize_mxfp4(b13, s13, torch.float32), "w13")
    bf16.weight_loader(bf16.w2_weight, dequantize_mxfp4(b2, s2, torch.float32), "w2")
    kept = layer()
    assert keep_mxfp4(kept)
    for name, t in (("gate_up_proj_blocks", b13), ("gate_up_proj_scales", s13), ("down_proj_blocks", b2),
                    ("down_proj_scales", s2)):
        p = getattr(kept, name)
        p.weight_loader(p, t)
    w13 = stacked_from_fused(dequantize_mxfp4(kept.gate_up_proj_blocks, kept.gate_up_proj_scales, torch.float32),
                             "w13", "interleaved_transposed")
    w2 = stacked_from_fused(dequantize_mxfp4(kept.down_proj_blocks, kept.down_proj_scales, torch.float32), "w2",
                            "interleaved_transposed")
    assert torch.equal(w13, bf16.w13_weight.data) and torch.equal(w2, bf16.w2_weight.data)
    assert dist.tp_size() == 1  # nothing global was touched
