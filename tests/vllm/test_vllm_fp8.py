"""FP8 block-scaled checkpoints (DeepSeek-style ``*.weight_scale_inv``, ``quant_method: fp8``) served by real vLLM
through the generated models: vLLM's FP8 layers hold the weights, the generated tables route the scales (dense
projections through their stacked shards, experts through the expert tables). vLLM takes FP8 only with bf16
activations, so the judge is transformers in float32 on the dequantized weights with the bf16 tie margin."""
from __future__ import annotations

import json

import pytest

vllm = pytest.importorskip("vllm")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from modelgen.runtime.layers.fp8 import dequantize_block_fp8, quantize_block_fp8  # noqa: E402
from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt  # noqa: E402
from tests.vllm.harness import serve, teacher_forced_misses  # noqa: E402

BLOCK = (128, 128)
FP8_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": list(BLOCK)}
SIZES = dict(hidden_size=256, intermediate_size=512, moe_intermediate_size=128)  # whole 128 x 128 blocks
PROMPTS = [tiny_prompt(), tiny_prompt(seed=3, length=40)]


def quantize(path) -> None:
    """Every 2-D ``*proj.weight`` (attention, MLP and expert projections; not embeddings, norms or routers) to FP8
    with one scale per 128 x 128 block, as DeepSeek releases them."""
    tensors = load_file(path / "model.safetensors")
    out = {}
    for name, t in tensors.items():
        if name.endswith(("proj.weight", "proj_with_mqa.weight")) and t.dim() == 2:
            out[name], out[name + "_scale_inv"] = quantize_block_fp8(t, BLOCK)
        else:
            out[name] = t
    save_file(out, path / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"] = FP8_CONFIG
    (path / "config.json").write_text(json.dumps(config))


def dequantized_reference(path, out):
    """transformers (float32) on the FP8 checkpoint's dequantized weights: saved as a plain checkpoint and loaded by
    from_pretrained, which also maps per-expert names onto transformers' fused expert tensors."""
    import shutil

    from transformers import AutoModelForCausalLM

    tensors = load_file(path / "model.safetensors")
    plain = {n: dequantize_block_fp8(t, tensors[n + "_scale_inv"], BLOCK) if n + "_scale_inv" in tensors else t
             for n, t in tensors.items() if not n.endswith("_scale_inv")}
    out.mkdir()
    save_file(plain, out / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    del config["quantization_config"]
    (out / "config.json").write_text(json.dumps(config))
    shutil.copy(path / "generation_config.json", out / "generation_config.json")
    return AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()


# DeepSeek-V3 as released: FP8 MLA projections (kv_b_proj dequantized by vLLM for absorption), FP8 routed and
# shared experts; vLLM's CPU MLA takes latent dims 512 + 64 (its AMX backend in bf16: nope / v dims of 64).
MLA_SIZES = dict(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=64, v_head_dim=64, q_lora_rank=128)


@pytest.mark.parametrize("arch,extra", [
    ("LlamaForCausalLM", {"head_dim": 64}),
    ("Qwen3MoeForCausalLM", {"head_dim": 64}),
    ("DeepseekV3ForCausalLM", MLA_SIZES),
])
def test_fp8_block_scaled_checkpoint(tmp_path, arch, extra):
    ckpt = tmp_path / "fp8"
    make_tiny_checkpoint(ckpt, arch, **SIZES, **extra)
    quantize(ckpt)
    hf = dequantized_reference(ckpt, tmp_path / "dequantized")
    served = serve(ckpt, PROMPTS, max_tokens=8, dtype="bfloat16")
    assert served.model_class.startswith("modelgen.generated.vllm."), served.model_class
    misses = [teacher_forced_misses(hf, p, t, margin=2e-2) for p, t in zip(PROMPTS, served.tokens)]
    assert not any(misses), misses
