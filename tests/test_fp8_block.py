"""FP8 block-scaled checkpoints (quant_method fp8, weight_block_size): dequantization, the checkpoint view both
loaders read through, its errors, and a tiny DeepSeek-V3 FP8 checkpoint on both targets vs transformers running the
dequantized weights."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from modelgen.runtime.layers.fp8 import dequantize_block_fp8, quantize_block_fp8, scale_shape
from modelgen.runtime.loader.checkpoint import Checkpoint, CheckpointError
from modelgen.runtime.loader.quantization import (
    Fp8BlockConfig, QuantizationError, parse_fp8, wrap_checkpoint,
)
from tests.deepseek_fixtures import hf_logits, make_deepseek

BLOCK = (32, 32)  # tiny model: several blocks per weight and partial edge blocks (kv_a_proj_with_mqa has 40 rows)
FP8_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": list(BLOCK)}
PROMPT = [(7 * i + 3) % 157 + 3 for i in range(40)]


def test_dequantize_partial_blocks_by_hand():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(70, 45, generator=g)
    q, s = quantize_block_fp8(w, BLOCK)
    assert q.dtype == torch.float8_e4m3fn and tuple(s.shape) == scale_shape(w.shape, BLOCK) == (3, 2)
    d = dequantize_block_fp8(q, s, BLOCK)
    for i in range(3):
        for j in range(2):
            rows, cols = slice(32 * i, 32 * i + 32), slice(32 * j, 32 * j + 32)
            assert torch.equal(d[rows, cols], q[rows, cols].float() * s[i, j])
    # e4m3 keeps 3 mantissa bits: relative error <= 2^-4 of each block's values, beyond subnormals
    big = w.abs() > s.repeat_interleave(32, 0)[:70].repeat_interleave(32, 1)[:, :45] * 2 ** -6 * 448
    assert ((d - w).abs() <= w.abs() * 2 ** -4 + 1e-6)[big].all()
    assert (d - w).abs().max() > 0  # it is lossy: the parity test below is against the dequantized weights


def test_config_parser():
    assert parse_fp8(FP8_CONFIG) == Fp8BlockConfig(method="fp8", raw=FP8_CONFIG, block=BLOCK)
    with pytest.raises(QuantizationError, match=r"^c/config\.json: quantization_config\.weight_block_size must"):
        parse_fp8({"quant_method": "fp8"}, "c/config.json")  # per-tensor FP8
    with pytest.raises(QuantizationError, match="activation_scheme 'static'"):
        parse_fp8(dict(FP8_CONFIG, activation_scheme="static"))


def quantize_checkpoint(path) -> dict[str, torch.Tensor]:
    """Quantize every linear weight of a saved DeepSeek checkpoint in place (as DeepSeek's FP8 release: not the
    router, norms, embeddings or lm_head); returns the dequantized weights transformers should run."""
    tensors = load_file(path / "model.safetensors")
    out, dequantized = {}, {}
    for name, t in tensors.items():
        linear = name.endswith("proj.weight") or name.endswith("proj_with_mqa.weight")
        if linear and t.dim() == 2:
            q, s = quantize_block_fp8(t, BLOCK)
            out[name], out[name + "_scale_inv"] = q, s
            dequantized[name] = dequantize_block_fp8(q, s, BLOCK)
        else:
            out[name] = t
    save_file(out, path / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((path / "config.json").read_text())
    cfg["quantization_config"] = FP8_CONFIG
    (path / "config.json").write_text(json.dumps(cfg))
    return dequantized


@pytest.fixture(scope="module")
def fp8_checkpoint(tmp_path_factory):
    import transformers

    path, ref = tmp_path_factory.mktemp("deepseek_fp8"), tmp_path_factory.mktemp("deepseek_dequantized")
    make_deepseek(path, "v3_yarn")
    make_deepseek(ref, "v3_yarn")
    dequantized = quantize_checkpoint(path)
    # transformers runs the dequantized weights: the same checkpoint with each FP8 weight replaced by its dequant
    # (loaded through from_pretrained, which also fuses the per-expert tensors as HF's model holds them).
    save_file({**load_file(ref / "model.safetensors"), **dequantized}, ref / "model.safetensors",
              metadata={"format": "pt"})
    hf = transformers.DeepseekV3ForCausalLM.from_pretrained(ref, dtype=torch.float32).eval()
    return path, hf, len(dequantized)


def fp8_llm(path, target, monkeypatch, dtype=torch.float32, **kw):
    """The engine on the FP8 checkpoint: CheckpointDir.open_weights reads it through wrap_checkpoint."""
    from modelgen.runtime.engine.llm import LLM

    return LLM(path, target=target, dtype=dtype, max_model_len=128, **kw)


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_fp8_deepseek_equals_transformers_on_dequantized_weights(fp8_checkpoint, target, monkeypatch):
    path, hf, count = fp8_checkpoint
    assert count >= 20  # q_a/q_b/kv_a/kv_b/o per layer, dense MLP, per-expert and shared expert projections
    model = fp8_llm(path, target, monkeypatch)
    err = (model.score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < 1e-4, f"{target}: FP8 prefill logits differ from HF on the dequantized weights by {err}"


def test_fp8_view_lists_no_scales_and_reads_model_dtype(fp8_checkpoint):
    path, _, count = fp8_checkpoint
    with Checkpoint(path) as raw:
        view = wrap_checkpoint(raw, parse_fp8(FP8_CONFIG), torch.bfloat16)
        assert len(raw.keys()) - len(view.keys()) == count
        assert not [k for k in view.keys() if k.endswith("_scale_inv")]
        key = "model.layers.1.self_attn.kv_a_proj_with_mqa.weight"
        assert raw.dtype(key) == torch.float8_e4m3fn and view.dtype(key) == torch.bfloat16
        assert torch.equal(view.get_slice(key)[8:24], view.get_tensor(key)[8:24])


@pytest.mark.parametrize("damage", ["missing", "misshaped"])
def test_bad_scale_is_named(fp8_checkpoint, tmp_path, damage):
    path, _, _ = fp8_checkpoint
    for f in path.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    tensors = load_file(tmp_path / "model.safetensors")
    key = "model.layers.0.self_attn.kv_b_proj.weight_scale_inv"
    if damage == "missing":
        del tensors[key]
    else:
        tensors[key] = tensors[key][:1].contiguous()  # kv_b_proj [112, 32] in 32-blocks needs [4, 1]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    want = r"no 'model\.layers\.0\.self_attn\.kv_b_proj\.weight_scale_inv'" if damage == "missing" else \
        r"'model\.layers\.0\.self_attn\.kv_b_proj\.weight_scale_inv' has shape \(1, 1\), expected \(4, 1\)"
    with Checkpoint(tmp_path) as raw, pytest.raises(CheckpointError, match=want):
        wrap_checkpoint(raw, parse_fp8(FP8_CONFIG), torch.float32)


def test_fp8_bf16_three_way_and_quantization_error(fp8_checkpoint, monkeypatch):
    """bf16 engine on the FP8 checkpoint: three-way against HF fp32/bf16 on the dequantized weights. And the cost of
    FP8 itself, against the unquantized model: relative logit error measured 0.046 (e4m3 keeps 3 mantissa bits)."""
    import copy

    from modelgen.runtime.testing import assert_close_three_way

    path, hf, _ = fp8_checkpoint
    gold = hf_logits(hf, PROMPT)
    floor = hf_logits(copy.deepcopy(hf).to(torch.bfloat16), PROMPT)
    ours = fp8_llm(path, "rocm", monkeypatch, dtype=torch.bfloat16).score(PROMPT).float()
    assert_close_three_way(gold, floor, ours, factor=2.0, atol=1e-2, name="fp8/bf16")
    unquantized = hf_logits(make_deepseek(path.parent / "unquantized", "v3_yarn"), PROMPT)
    rel = ((gold - unquantized).norm() / unquantized.norm()).item()
    assert 1e-3 < rel < 0.08, f"FP8 relative logit error {rel}"


def test_wrap_checkpoint_routes_each_method(fp8_checkpoint):
    from modelgen.runtime.loader.mxfp4 import Mxfp4DequantCheckpoint
    from modelgen.runtime.loader.quantization import SUPPORTED_METHODS, Fp8DequantCheckpoint

    path, _, _ = fp8_checkpoint
    with Checkpoint(path) as raw:
        assert wrap_checkpoint(raw, None, torch.float32) is raw
        fp8 = wrap_checkpoint(raw, SUPPORTED_METHODS["fp8"](FP8_CONFIG), torch.float32)
        assert isinstance(fp8, Fp8DequantCheckpoint)
        mx = wrap_checkpoint(raw, SUPPORTED_METHODS["mxfp4"]({"quant_method": "mxfp4"}), torch.float32)
        assert isinstance(mx, Mxfp4DequantCheckpoint) and set(mx.keys()) == set(raw.keys())  # no *_blocks here


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_fp8_applies_to_every_spec_qwen3(tmp_path_factory, target, monkeypatch):
    """Not DeepSeek only: a Qwen3 FP8 checkpoint (the same format; q/k/v fused into qkv_proj and gate/up into
    gate_up_proj after dequantization) equals transformers on the dequantized weights."""
    import transformers

    from tests.moe_fixtures import make_moe

    path, ref = tmp_path_factory.mktemp("qwen3_fp8"), tmp_path_factory.mktemp("qwen3_dequantized")
    make_moe(path, "qwen3")
    make_moe(ref, "qwen3")
    dequantized = quantize_checkpoint(path)
    assert any(".k_proj." in k for k in dequantized) and any(".gate_proj." in k for k in dequantized)
    save_file({**load_file(ref / "model.safetensors"), **dequantized}, ref / "model.safetensors",
              metadata={"format": "pt"})
    hf = transformers.Qwen3ForCausalLM.from_pretrained(ref, dtype=torch.float32).eval()
    err = (fp8_llm(path, target, monkeypatch).score(PROMPT).float() - hf_logits(hf, PROMPT)).abs().max().item()
    assert err < 1e-4, f"qwen3 FP8 / {target}: {err}"


@pytest.mark.parametrize("world", [1, 2])
def test_fp8_kept_layers_shard_scales_with_their_blocks(monkeypatch, world):
    """Every rank's kept FP8 weight + weight_scale_inv dequantize to that rank's slice of the dequantized full weight
    (column, row, merged and QKV layers, TP 1 and 2 simulated rank by rank); a layer whose shard boundary splits a
    block refuses to switch (it stays dequantized)."""
    from modelgen.runtime import distributed as dist
    from modelgen.runtime.layers.linear import (
        ColumnParallelLinear, MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear,
    )

    blk = (32, 32)
    g = torch.Generator().manual_seed(0)

    def q(n, k):
        w = torch.randn(n, k, generator=g)
        w[:5] *= 30
        return quantize_block_fp8(w, blk)

    for rank in range(world):
        monkeypatch.setattr(dist, "tp_size", lambda: world)
        monkeypatch.setattr(dist, "tp_rank", lambda r=rank: r)
        cases = []
        w, s = q(128, 96)
        cases.append((ColumnParallelLinear(96, 128, bias=False), [(None, w, s)],
                      dequantize_block_fp8(w, s, blk).narrow(0, rank * 128 // world, 128 // world)))
        w, s = q(64, 128)
        cases.append((RowParallelLinear(128, 64, bias=False), [(None, w, s)],
                      dequantize_block_fp8(w, s, blk).narrow(1, rank * 128 // world, 128 // world)))
        (wg, sg), (wu, su) = q(128, 64), q(128, 64)
        full = [dequantize_block_fp8(x, y, blk).narrow(0, rank * 128 // world, 128 // world) for x, y in ((wg, sg), (wu, su))]
        cases.append((MergedColumnParallelLinear(64, [128, 128], bias=False), [(0, wg, sg), (1, wu, su)],
                      torch.cat(full)))
        (wq, sq), (wk, sk), (wv, sv) = q(4 * 32, 64), q(2 * 32, 64), q(2 * 32, 64)
        per = [dequantize_block_fp8(x, y, blk) for x, y in ((wq, sq), (wk, sk), (wv, sv))]
        h, kv = 4 // world, 2 // world
        want = torch.cat([per[0].narrow(0, rank * h * 32, h * 32), per[1].narrow(0, rank * kv * 32, kv * 32),
                          per[2].narrow(0, rank * kv * 32, kv * 32)])
        cases.append((QKVParallelLinear(64, 32, 4, 2, bias=False), [("q", wq, sq), ("k", wk, sk), ("v", wv, sv)], want))
        for layer, parts, want in cases:
            assert layer.keep_fp8(blk), type(layer).__name__
            for shard, wt, sc in parts:
                for p, t in ((layer.weight, wt), (layer.weight_scale_inv, sc)):
                    p.weight_loader(p, t, shard) if shard is not None else p.weight_loader(p, t)
            got = dequantize_block_fp8(layer.weight, layer.weight_scale_inv, blk)
            assert torch.equal(got, want), (type(layer).__name__, rank)
        if world == 2:  # 48 output rows per rank: rank 1's rows start inside a 32-row block
            assert not ColumnParallelLinear(64, 96, bias=False).keep_fp8(blk)
            assert not MergedColumnParallelLinear(64, [96, 96], bias=False).keep_fp8(blk)
