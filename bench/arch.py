"""Decode benchmark for the newer architectures: modelgen's rocm module vs transformers eager, one GPU, one run.

``--model`` picks a shape (few layers of the real model, the rest of its config as released):
  * ``qwen3_next``: Qwen3-Next-80B-A3B (Gated DeltaNet 3:1 linear:full schedule, 512 experts top-10 + shared expert);
  * ``deepseek_v3``: DeepSeek-V3 (MLA, 256 experts top-8 + shared, first layer dense), ``--quant fp8``: the FP8
    block-scaled checkpoint (128x128 scales, DeepSeek's release format);
  * ``gpt_oss``: gpt-oss-20b (alternating sliding-window/full attention with sinks, 32 experts top-4),
    ``--quant mxfp4``: the MXFP4 checkpoint (experts as released).

``--quant``: transformers' weights are first replaced by their quantize-dequantize round trip (so transformers, run
eagerly in bf16, computes exactly what the quantized checkpoint holds), the quantized checkpoint is written from them
(``write_quantized``, no bf16 checkpoint in between unless ``--systems`` includes ``modelgen``, the bf16 leg), and
modelgen runs it once per ``--quant-modes`` leg: ``keep`` (weights stay FP8 / MXFP4 on the GPU: block-scaled FP8
GEMMs, MXFP4 MoE kernels) and ``dequantize`` (bf16 at load), as JSON fields ``modelgen_<quant>_keep`` /
``modelgen_<quant>_dequantize`` (tok/s, greedy tokens and agreement with transformers, load time, bytes on the GPU)
and ``<quant>_keep_vs_dequantize_greedy_equal``.

Steps: the HBM copy rate and the bf16 matmul peak; transformers builds the model with its own random initialisation
on the GPU in bf16 and writes it with ``save_pretrained``; modelgen loads that checkpoint; decode tokens/s at each
batch (prompt ``--prompt``, ``--new`` tokens, rate = batch * (N - 1) / (T(N) - T(1)) for every system); the
roofline = batch x copy rate / bytes one decode step must read: every weight but the embedding, the routed experts
at the expected number of distinct experts the batch touches (E * (1 - (1 - k/E)^b), uniform routing as random
weights give), plus each sequence's cache (K/V of full-attention layers, the window of sliding layers, MLA's latent,
GDN's recurrent state read and written, fp32). ``active_weight_roofline_tok_s_bs1`` is weights only (batch 1).

Writes ``--out`` (JSON, rewritten after every phase so a cut run keeps what it measured).

  python -m bench.arch --model qwen3_next --layers 8 --out bench/results/h200-qwen3-next-80b-a3b.json
"""
from __future__ import annotations

import argparse
import gc
import json
import platform
import re
import shutil
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import log  # noqa: E402
from bench.decode import hf_generate, measure_ceilings, wall, warm_page_cache  # noqa: E402
from bench.kernel_profile import kernel_profiles  # noqa: E402
from modelgen import settings  # noqa: E402

# The released configs' shapes (num_hidden_layers is replaced by --layers).
SHAPES = {
    "qwen3_next": dict(
        name="Qwen3-Next-80B-A3B", config="Qwen3NextConfig", of_layers=48, layers=8,
        cfg=dict(hidden_size=2048, intermediate_size=5120, num_attention_heads=16, num_key_value_heads=2,
                 head_dim=256, vocab_size=151936, num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
                 shared_expert_intermediate_size=512, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                 linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                 linear_value_head_dim=128, linear_conv_kernel_dim=4, full_attention_interval=4,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
                 max_position_embeddings=262144, rms_norm_eps=1e-6, tie_word_embeddings=False,
                 bos_token_id=151643, eos_token_id=151645)),
    "deepseek_v3": dict(
        name="DeepSeek-V3", config="DeepseekV3Config", of_layers=61, layers=2,
        cfg=dict(hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=256,
                 n_shared_experts=1, num_experts_per_tok=8, n_group=8, topk_group=4, routed_scaling_factor=2.5,
                 first_k_dense_replace=1, norm_topk_prob=True, num_attention_heads=128, num_key_value_heads=128,
                 q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                 vocab_size=129280, max_position_embeddings=163840, rms_norm_eps=1e-6, tie_word_embeddings=False,
                 rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                                  "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                                  "mscale": 1.0, "mscale_all_dim": 1.0},
                 rope_interleave=True, bos_token_id=0, eos_token_id=1)),
    "gpt_oss": dict(
        name="gpt-oss-20b", config="GptOssConfig", of_layers=24, layers=4,
        cfg=dict(hidden_size=2880, intermediate_size=2880, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                 vocab_size=201088, num_local_experts=32, num_experts_per_tok=4, sliding_window=128,
                 swiglu_limit=7.0, attention_bias=True, max_position_embeddings=131072, rms_norm_eps=1e-5,
                 rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                                  "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                                  "truncate": False},
                 tie_word_embeddings=False, bos_token_id=199998, eos_token_id=200002)),
    "llama": dict(  # the dense batch-32 goal's shape (bench/decode.py times it against transformers)
        name="Llama-3-8B", config="LlamaConfig", of_layers=32, layers=32,
        cfg=dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                 head_dim=128, vocab_size=128256, max_position_embeddings=8192, rms_norm_eps=1e-5,
                 rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, tie_word_embeddings=False,
                 bos_token_id=128000, eos_token_id=128001)),
}
ROUTED = re.compile(r"(?<!shared_)experts\.")  # routed experts (not Qwen's shared_expert nor DeepSeek's shared_experts)


def hf_config(model: str, layers: int):
    import transformers

    shape = SHAPES[model]
    cfg = dict(shape["cfg"], num_hidden_layers=layers)
    if model == "gpt_oss":
        cfg["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    if model == "qwen3_next":
        cfg["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
    return getattr(transformers, shape["config"])(**cfg)


def experts_of(config) -> tuple[int, int]:
    """(experts, top-k); (1, 1) for a dense model (no routed weights: the expert term of step_bytes is zero)."""
    E = getattr(config, "num_experts", None) or getattr(config, "n_routed_experts", None) \
        or getattr(config, "num_local_experts", None)
    return (E, config.num_experts_per_tok) if E else (1, 1)


# ------------------------------------------------------------------------------------------------------------ bytes
def step_bytes(hf, model: str, batch: int, context: float) -> dict:
    """Bytes one decode step reads at ``batch`` sequences of ``context`` tokens (bf16 weights)."""
    config = hf.config
    E, k = experts_of(config)
    distinct = E * (1 - (1 - k / E) ** batch)
    dense = routed = 0
    for name, p in hf.named_parameters():
        if "embed_tokens" in name:  # one row per token: negligible
            continue
        if ROUTED.search(name):
            routed += p.numel() * p.element_size()
        else:
            dense += p.numel() * p.element_size()
    moe_layers = sum(1 for layer in hf.model.layers if any(ROUTED.search(n) for n, _ in layer.named_parameters()))
    per_expert = routed / max(1, moe_layers * E)
    weights = dense + moe_layers * distinct * per_expert
    L = config.num_hidden_layers
    cache = 0.0
    if model == "qwen3_next":
        types = config.layer_types
        lin = sum(t == "linear_attention" for t in types)
        state = config.linear_num_value_heads * config.linear_key_head_dim * config.linear_value_head_dim * 4
        conv = (2 * config.linear_num_key_heads * config.linear_key_head_dim
                + config.linear_num_value_heads * config.linear_value_head_dim) * (config.linear_conv_kernel_dim - 1) * 2
        kv = 2 * config.num_key_value_heads * config.head_dim * 2
        cache = batch * (lin * 2 * (state + conv) + (L - lin) * context * kv)
    elif model == "deepseek_v3":
        cache = batch * L * context * (config.kv_lora_rank + config.qk_rope_head_dim) * 2
    elif model == "llama":  # bf16 K and V of every layer
        cache = batch * L * context * 2 * config.num_key_value_heads * config.head_dim * 2
    elif model == "gpt_oss":
        kv = 2 * config.num_key_value_heads * config.head_dim * 2
        cache = batch * sum((min(context, config.sliding_window) if t == "sliding_attention" else context) * kv
                            for t in config.layer_types)
    return {"weights": weights, "cache": cache, "total": weights + cache, "distinct_experts": distinct,
            "dense_weight_bytes": dense, "routed_expert_bytes_total": routed, "per_expert": per_expert,
            "moe_layers": moe_layers}


# ------------------------------------------------------------------------------------------------------- checkpoints
def build_and_save_hf(model: str, layers: int, path: Path | None, quant: str = "none"):
    """transformers' model with its random initialisation (bf16, on the GPU); ``quant``: its weights replaced by
    their quantize-dequantize round trip (:func:`fake_quantize_`), so transformers runs exactly the dequantized
    weights of the quantized checkpoint the modelgen legs load; ``path``: also written by ``save_pretrained``."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    config = hf_config(model, layers)
    torch.manual_seed(0)
    with torch.device("cuda"):
        hf = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    hf.eval().requires_grad_(False)
    if quant != "none":
        fake_quantize_(hf, quant)
    if path is not None:
        hf.save_pretrained(path)
    hf.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=None, pad_token_id=0,
                                            do_sample=False)
    return hf


def quantize_fp8_gpu(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize_block_fp8``'s arithmetic (per 128x128 block: ``scale_inv = amax / 448``, ``W / scale_inv`` rounded
    to float8_e4m3fn) on the tensor's device: ``(W_fp8 [N, K], scale_inv [ceil(N/128), ceil(K/128)] float32)``."""
    o, i = t.shape
    R, C = -(-o // 128), -(-i // 128)
    pad = torch.zeros(R * 128, C * 128, device=t.device, dtype=torch.float32)
    pad[:o, :i] = t.float()
    tiles = pad.view(R, 128, C, 128)
    s = tiles.abs().amax(dim=(1, 3)).clamp(min=1e-12) / torch.finfo(torch.float8_e4m3fn).max
    return (tiles / s[:, None, :, None]).view_as(pad)[:o, :i].to(torch.float8_e4m3fn).contiguous(), s


def _fp8_target(name: str, t: torch.Tensor) -> bool:
    """DeepSeek's FP8 release quantizes every linear weight (attention, dense MLP, experts, shared experts), not the
    router, norms, embeddings or lm_head: 2-D ``*proj.weight`` and transformers v5's fused expert tensors (3-D)."""
    if t.dim() == 2:
        return name.endswith(("proj.weight", "proj_with_mqa.weight"))
    return t.dim() == 3 and name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj"))


def _mxfp4_target(name: str, t: torch.Tensor) -> bool:
    """gpt-oss's MXFP4 release quantizes the fused experts only."""
    return t.dim() == 3 and name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj"))


def _fp8_round_trip(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W_fp8, scale_inv)`` of a 2-D weight or of each matrix of stacked experts (``[E, out, in]``)."""
    if t.dim() == 2:
        return quantize_fp8_gpu(t)
    parts = [quantize_fp8_gpu(m) for m in t]
    return torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts])


@torch.no_grad()
def fake_quantize_(hf, quant: str) -> int:
    """Replace each weight the quantized checkpoint stores quantized by its dequantized round trip, in place (on
    the GPU): afterwards transformers runs the dequantized weights, the function both modelgen modes compute."""
    from modelgen.runtime.layers.fp8 import dequantize_block_fp8
    from modelgen.runtime.ops.mxfp4 import dequantize_mxfp4, quantize_mxfp4

    n = 0
    for name, p in hf.named_parameters():
        if quant == "fp8" and _fp8_target(name, p):
            q, s = _fp8_round_trip(p.data)
            if p.dim() == 2:
                p.data.copy_(dequantize_block_fp8(q, s, (128, 128), p.dtype))
            else:
                for e in range(p.shape[0]):
                    p.data[e].copy_(dequantize_block_fp8(q[e], s[e], (128, 128), p.dtype))
        elif quant == "mxfp4" and _mxfp4_target(name, p):
            for e in range(p.shape[0]):  # one expert at a time: the quantizer holds 8 float32 copies
                blocks, scales = quantize_mxfp4(p.data[e:e + 1])
                p.data[e:e + 1].copy_(dequantize_mxfp4(blocks, scales, p.dtype))
        else:
            continue
        n += 1
    return n


def write_quantized(hf, quant: str, dst: Path, shard_bytes: int = 4 << 30) -> int:
    """The quantized checkpoint straight from transformers' (already round-tripped) weights, without a bf16
    checkpoint in between: FP8 block scales (DeepSeek's release format: float8_e4m3fn + ``weight_scale_inv`` per
    128x128 block, ``quantize_block_fp8``'s arithmetic on the GPU; fused experts stored ``[E, out, in]`` with
    ``[E, rows, cols]`` scales) or MXFP4 experts (gpt-oss's: ``*_blocks`` / ``*_scales``, transformers' packing).
    Names are transformers v5's (fused experts), which every modelgen MoE spec loads. Sharded safetensors + index."""
    from safetensors.torch import save_file

    from modelgen.runtime.ops.mxfp4 import quantize_mxfp4

    dst.mkdir(parents=True, exist_ok=True)
    shards: list[dict] = [{}]
    size, n = 0, 0

    def put(name: str, t: torch.Tensor) -> None:
        nonlocal size
        if size and size + t.numel() * t.element_size() > shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t.detach().contiguous().cpu()
        size += t.numel() * t.element_size()

    for name, t in hf.state_dict().items():
        if quant == "fp8" and _fp8_target(name, t):
            q, s = _fp8_round_trip(t)
            put(name, q)
            put(name + "_scale_inv", s)
        elif quant == "mxfp4" and _mxfp4_target(name, t):
            parts = [quantize_mxfp4(t[e:e + 1]) for e in range(t.shape[0])]
            put(name + "_blocks", torch.cat([p[0] for p in parts]))
            put(name + "_scales", torch.cat([p[1] for p in parts]))
        else:
            put(name, t)
            continue
        n += 1
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(dst / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in shard})
    (dst / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    hf.config.architectures = [type(hf).__name__]
    hf.config.save_pretrained(dst)  # config.json as save_pretrained writes it
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"] = (
        {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
        if quant == "fp8" else
        {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                            "model.embed_tokens", "lm_head"]})
    (dst / "config.json").write_text(json.dumps(cfg, default=str))
    return n


# --------------------------------------------------------------------------------------------------------- diagnose
def _hf_torch_gdn(enable: bool) -> list:
    """Bind transformers' GDN functions to their torch references (``__wrapped__`` of the fla-bound ones); returns
    what to restore."""
    import importlib

    saved = []
    for mod_name in ("qwen3_next",):
        mod = importlib.import_module(f"transformers.models.{mod_name}.modeling_{mod_name}")
        for name in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn",
                     "causal_conv1d_update"):
            fn = getattr(mod, name, None)
            if fn is None:
                continue
            saved.append((mod, name, fn))
            while enable and hasattr(fn, "__wrapped__"):
                fn = fn.__wrapped__
            setattr(mod, name, fn)
    return saved


def diagnose(llm, hf, model: str, prompt: list[int]) -> dict:
    """Last-position bf16 logits of one prompt: transformers (fla-bound and torch GDN functions), modelgen with every
    Triton path, with none (``MODELGEN_BACKEND=torch`` on the GPU), and with one component's GPU path off at a time:
    a wrong kernel shows as the component whose removal brings modelgen back to its torch path."""
    import importlib
    import os

    from modelgen.runtime.layers.gated_deltanet import ops as gd
    from modelgen.runtime.ops import gpu as real_gpu
    from modelgen.runtime.layers.gated_deltanet import kernels as ggd

    class Off:
        def __getattr__(self, name):
            return getattr(real_gpu, name)

        @staticmethod
        def enabled(x):
            return False

    ids = torch.tensor([prompt], device="cuda")
    with torch.inference_mode():
        hf_default = hf(ids).logits[0, -1].float()
        saved = _hf_torch_gdn(True) if model == "qwen3_next" else []
        hf_torch = hf(ids).logits[0, -1].float()
        for mod, name, fn in saved:
            setattr(mod, name, fn)
    score = lambda: llm.score(prompt)[-1].float()  # noqa: E731
    os.environ["MODELGEN_BACKEND"] = "torch"
    real_gpu.refresh()
    try:
        ref = score()
    finally:
        os.environ.pop("MODELGEN_BACKEND")
        real_gpu.refresh()
    full = score()

    def row(x):
        return {"argmax": int(x.argmax()), "max_abs_vs_modelgen_torch": (x - ref).abs().max().item(),
                "max_abs_vs_hf_torch": (x - hf_torch).abs().max().item()}

    out = {"logit_scale_max_abs": hf_torch.abs().max().item(), "hf_default": row(hf_default),
           "hf_torch_gdn": row(hf_torch), "modelgen_torch_backend": row(ref), "modelgen_triton": row(full)}
    for name in ("norm", "moe", "activation", "linear", "attention", "rotary"):
        mod = importlib.import_module(f"modelgen.runtime.layers.{name}")
        keep = mod.gpu
        mod.gpu = Off()
        try:
            out[f"triton_but_{name}_torch"] = row(score())
        except Exception as e:
            out[f"triton_but_{name}_torch"] = f"{type(e).__name__}: {e}"[:300]
        finally:
            mod.gpu = keep
    for label, obj, attr, repl in (("gdn_kernels", gd, "_triton", lambda x: False),
                                   ("fla_prefill", ggd, "fla_chunk", lambda: None)):
        keep = getattr(obj, attr)
        setattr(obj, attr, repl)
        try:
            out[f"triton_but_{label}_torch"] = row(score())
        except Exception as e:
            out[f"triton_but_{label}_torch"] = f"{type(e).__name__}: {e}"[:300]
        finally:
            setattr(obj, attr, keep)
    for k, v in out.items():
        log(f"  diag {k}: {v}")
    return out


# -------------------------------------------------------------------------------------------------------------- main
@torch.no_grad()
def divergence_report(hf, llm, prompt: list[int], want: list[int], got: list[int]) -> dict | None:
    """Near-tie or bug? At the first step where modelgen's greedy token differs from transformers' (both bf16), on
    their common prefix: transformers' bf16 and float32 logits and modelgen's, the float32 margin between the two
    tokens and each system's bf16 error against float32 there (the whole vocabulary). A float32 margin within the
    bf16 errors is a near-tie that either system could break either way; a wide margin that modelgen gets wrong is not.
    """
    import copy

    d = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), None)
    if d is None:
        return None
    seq = prompt + want[:d]
    ids = torch.tensor([seq], device=next(hf.parameters()).device)
    hf_bf16 = hf(ids).logits[0, -1].float()
    need = sum(p.numel() for p in hf.parameters()) * 4
    if ids.is_cuda and torch.cuda.mem_get_info(ids.device)[0] < 1.2 * need:
        return {"step": d, "skipped": f"no room for a float32 copy of transformers' model ({need / 1e9:.1f} GB)"}
    hf32 = copy.deepcopy(hf).float()
    hf_fp32 = hf32(ids).logits[0, -1].float()
    del hf32
    gc.collect()
    torch.cuda.empty_cache()
    ours = llm.score(seq)[-1].float().to(hf_fp32.device)
    a, b = want[d], got[d]
    top = torch.topk(hf_fp32, 2).values
    return {
        "step": d, "hf_token": a, "modelgen_token": b,
        "fp32_logit_hf_token_minus_modelgen_token": (hf_fp32[a] - hf_fp32[b]).item(),
        "fp32_top2_margin": (top[0] - top[1]).item(),
        "fp32_rank_of_modelgen_token": int((hf_fp32 > hf_fp32[b]).sum()),
        "hf_bf16_logit_hf_token_minus_modelgen_token": (hf_bf16[a] - hf_bf16[b]).item(),
        "modelgen_logit_modelgen_token_minus_hf_token": (ours[b] - ours[a]).item(),
        "max_abs_hf_bf16_vs_fp32": (hf_bf16 - hf_fp32).abs().max().item(),
        "max_abs_modelgen_vs_fp32": (ours - hf_fp32).abs().max().item(),
        "mean_abs_hf_bf16_vs_fp32": (hf_bf16 - hf_fp32).abs().mean().item(),
        "mean_abs_modelgen_vs_fp32": (ours - hf_fp32).abs().mean().item(),
        "fp32_logit_std": hf_fp32.std().item(),
        "fp32_argmax": int(hf_fp32.argmax()),
    }


def time_modelgen(llm, prompts: dict, new: int, batches: list[int]) -> dict:
    from modelgen.runtime.engine.sampler import SamplingParams

    greedy = lambda n: SamplingParams(max_new_tokens=n, ignore_eos=True)  # noqa: E731
    out = {"decode_tok_s": {}, "step_ms": {}}
    t0 = time.perf_counter()
    if getattr(llm.runner, "graphs", None) is not None:
        llm.warmup()
    out["graph_capture_s"] = time.perf_counter() - t0
    for b in batches:
        ids = prompts[b].tolist()
        llm.generate(ids, greedy(2))
        t1 = min(wall(lambda: llm.generate(ids, greedy(1))) for _ in range(2))
        tn = min(wall(lambda: llm.generate(ids, greedy(new))) for _ in range(2))
        out["decode_tok_s"][str(b)] = b * (new - 1) / (tn - t1)
        out["step_ms"][str(b)] = (tn - t1) / (new - 1) * 1e3
        log(f"  modelgen bs{b}: {out['decode_tok_s'][str(b)]:.1f} tok/s ({out['step_ms'][str(b)]:.2f} ms/step)")
    from modelgen.runtime.layers.moe import kernels as gpu_moe

    # The MoE path each small-batch shape timed (pair candidates vs the sorted path, ms per call) and chose.
    out["moe_path_timings_ms"] = {repr(k): v for k, v in gpu_moe.TIMINGS.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--quant", choices=["none", "fp8", "mxfp4"], default="none",
                    help="transformers runs the quantize-dequantize round trip of its weights and modelgen the "
                         "quantized checkpoint, once per --quant-modes")
    ap.add_argument("--quant-modes", nargs="+", choices=["keep", "dequantize"], default=["keep", "dequantize"],
                    help="LLM(quantized_weights=...) legs on the quantized checkpoint")
    ap.add_argument("--systems", nargs="+", default=None,
                    help="modelgen: the bf16 checkpoint (save_pretrained); hf_eager: transformers' eager timing "
                         "(default: both; with --quant only hf_eager: the dequantize leg runs the bf16 kernels on "
                         "the same weights, and the budget goes to the quantized legs)")
    ap.add_argument("--diagnose", action="store_true",
                    help="per-component logit comparison (see diagnose()) instead of modelgen's greedy check and timing")
    ap.add_argument("--no-graphs", action="store_true", help="modelgen decodes eagerly (no CUDA graphs)")
    ap.add_argument("--profile", action="store_true", help="per-kernel GPU time of decode steps (eager)")
    ap.add_argument("--profile-batches", type=int, nargs="+", default=None,
                    help="batch sizes of --profile (default: the first of --batches); each must be in --batches")
    ap.add_argument("--budget-s", type=float, default=400, help="skip remaining phases past this")
    ap.add_argument("--divergence", action="store_true",
                    help="at a greedy mismatch with transformers: float32 margins at the first divergence "
                         "(divergence_report; a float32 copy of transformers' model on the GPU for a moment)")
    args = ap.parse_args(argv)
    if args.systems is None:
        args.systems = ["hf_eager"] if args.quant != "none" else ["modelgen", "hf_eager"]
    shape = SHAPES[args.model]
    layers = args.layers or shape["layers"]
    out_path = Path(args.out or f"bench/results/h200-{args.model}.json")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    ckpt = Path(args.ckpt or f"/tmp/modelgen-bench-{args.model}")
    t_start = time.perf_counter()
    left = lambda: args.budget_s - (time.perf_counter() - t_start)  # noqa: E731

    import transformers
    import triton

    from modelgen.runtime.layers.gated_deltanet import kernels as ggd

    res: dict = {
        "gpu": torch.cuda.get_device_name(0),
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
                     "transformers": transformers.__version__, "python": platform.python_version(),
                     "fla": getattr(sys.modules.get("fla"), "__version__", None) if ggd.fla_chunk() else None},
        "model": {"shape": shape["name"], "layers": layers, "of_layers": shape["of_layers"], "dtype": "bfloat16",
                  "weights": "random, transformers' initialisation, written by save_pretrained",
                  "config": {k: v for k, v in hf_config(args.model, layers).to_dict().items()
                             if not isinstance(v, (dict, list)) or k in ("layer_types", "rope_parameters")}},
        "setup": {"prompt_tokens": args.prompt, "new_tokens": args.new, "batches": args.batches,
                  "decode_rate": "batch * (N - 1) / (T(N new tokens) - T(1 new token)), same for every system"},
    }

    def save() -> None:
        out_path.write_text(json.dumps(res, indent=2, default=str))

    log("ceilings")
    res.update(measure_ceilings())
    copy = res["hbm_copy_tb_s"] * 1e12
    save()

    quant = args.quant
    bf16_leg = "modelgen" in args.systems
    log("transformers model" + (f" ({quant} round trip)" if quant != "none" else "")
        + (" + save_pretrained " + str(ckpt) if bf16_leg else ""))
    shutil.rmtree(ckpt, ignore_errors=True)
    t0 = time.perf_counter()
    hf = build_and_save_hf(args.model, layers, ckpt if bf16_leg else None, quant)
    res["checkpoint"] = {"bytes": sum(f.stat().st_size for f in ckpt.glob("*.safetensors")) if bf16_leg else None,
                         "build_and_write_s": time.perf_counter() - t0}
    if quant != "none":
        res["model"]["weights"] += (f"; every weight the {quant} checkpoint quantizes replaced by its quantize-"
                                    f"dequantize round trip, so transformers and every modelgen leg compute the "
                                    f"same function")
    ctx = args.prompt + args.new / 2
    res["bytes_per_step"] = {str(b): step_bytes(hf, args.model, b, ctx) for b in args.batches}
    w1 = step_bytes(hf, args.model, 1, 0)["weights"]
    res["active_weight_bytes_bs1"] = w1
    res["active_weight_roofline_tok_s_bs1"] = copy / w1
    res["roofline_tok_s"] = {str(b): b * copy / res["bytes_per_step"][str(b)]["total"] for b in args.batches}
    log({k: res[k] for k in ("hbm_copy_tb_s", "active_weight_bytes_bs1", "active_weight_roofline_tok_s_bs1",
                             "roofline_tok_s", "checkpoint")})
    save()
    if bf16_leg:
        warm_page_cache(ckpt)

    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams

    gen = torch.Generator().manual_seed(1)
    prompts = {b: torch.randint(1000, hf.config.vocab_size - 1000, (b, args.prompt), generator=gen)
               for b in args.batches}
    kw = dict(target="rocm", dtype="bfloat16", device="cuda", max_model_len=args.prompt + args.new + 16,
              max_num_seqs=max(args.batches), cuda_graphs=not args.no_graphs)
    res["setup"]["modelgen_cuda_graphs"] = not args.no_graphs
    reference: dict[str, list[int]] = {}

    def hf_reference() -> list[int]:
        """transformers' 8 greedy tokens on the first prompt (once; its torch GDN functions for qwen3_next: fla's
        bf16 prefill moves random-weight logits by ~0.5, see runtime/layers/gated_deltanet/ops.py)."""
        if "tokens" not in reference:
            ids = prompts[args.batches[0]][:1].cuda()
            saved = _hf_torch_gdn(True) if args.model == "qwen3_next" else []
            try:
                reference["tokens"] = hf_generate(hf, ids, 8, static=False)[0, ids.shape[1]:].tolist()
            finally:
                for mod, name, fn in saved:
                    setattr(mod, name, fn)
        return reference["tokens"]

    def run_modelgen(path: Path, key: str, graphs: bool = True, **extra) -> None:
        try:
            llm = LLM(path, **dict(kw, cuda_graphs=kw["cuda_graphs"] and graphs), **extra)
            entry = res.setdefault(key, {})
            entry["load_s"] = llm.load_seconds
            entry["backend"] = f"{llm.backend} ({llm.backend_reason})"
            entry["quantized_weights"] = llm.quantized_weights
            entry["weight_bytes_on_gpu"] = sum(p.numel() * p.element_size() for p in llm.model.parameters())
            log(key, "loaded in", f"{llm.load_seconds:.1f}s;", entry["backend"], llm.quantized_weights)
            if args.diagnose and key == "modelgen":
                res["diagnose"] = diagnose(llm, hf, args.model, prompts[args.batches[0]][0].tolist())
                save()
                return
            want = hf_reference()
            ids = prompts[args.batches[0]][:1].tolist()
            got = llm.generate(ids, SamplingParams(max_new_tokens=8, ignore_eos=True))[0]
            entry["greedy_tokens"] = got
            entry["greedy_agreement_first_8_vs_hf"] = sum(a == b for a, b in zip(want, got))
            log("greedy agreement", entry["greedy_agreement_first_8_vs_hf"], "/ 8", want, got)
            if entry["greedy_agreement_first_8_vs_hf"] < 8 and args.divergence and left() > 60:
                try:
                    entry["first_divergence"] = divergence_report(hf, llm, ids[0], want, got)
                    log("first divergence", entry["first_divergence"])
                except Exception as e:  # diagnostics only: the timing still runs
                    entry["first_divergence"] = f"{type(e).__name__}: {e}"[:300]
            entry.update(time_modelgen(llm, prompts, args.new, args.batches))
            del llm
        except Exception as e:  # record and go on: the other systems still run
            import traceback

            log(key, "FAILED", traceback.format_exc()[-2000:])
            if graphs and kw["cuda_graphs"] and "captur" in str(e):  # a path that cannot be captured: time it eagerly
                res.setdefault(key, {})["graphs_error"] = f"{type(e).__name__}: {e}"[:600]
                res[key]["cuda_graphs"] = False
                gc.collect()
                torch.cuda.empty_cache()
                return run_modelgen(path, key, graphs=False, **extra)
            res.setdefault(key, {})["error"] = f"{type(e).__name__}: {e}"[:600]
        gc.collect()
        torch.cuda.empty_cache()
        save()

    if bf16_leg:
        run_modelgen(ckpt, "modelgen")

    if "hf_eager" in args.systems:
        entry = res.setdefault("hf_eager", {"decode_tok_s": {}})
        entry["weights"] = "bf16" + (f" ({quant} round trip: the dequantized weights)" if quant != "none" else "")
        if args.model == "qwen3_next":
            entry["gdn_kernels"] = "fla (transformers binds fla when it imports)" if ggd.fla_chunk() else "torch"
        res["modelgen_gdn_prefill"] = settings.get("MODELGEN_GDN_PREFILL") or "torch chunked reference"
        for b in args.batches:
            if left() < 40:
                entry.setdefault("skipped", []).append(b)
                continue
            ids = prompts[b].cuda()
            try:
                hf_generate(hf, ids, 2, static=False)
                t1 = wall(lambda: hf_generate(hf, ids, 1, static=False))
                tn = wall(lambda: hf_generate(hf, ids, args.new, static=False))
            except Exception as e:
                entry.setdefault("errors", {})[str(b)] = f"{type(e).__name__}: {e}"[:400]
                log(f"  hf eager bs{b}: FAILED {type(e).__name__}: {str(e)[:300]}")
                continue
            entry["decode_tok_s"][str(b)] = b * (args.new - 1) / (tn - t1)
            log(f"  hf eager bs{b}: {entry['decode_tok_s'][str(b)]:.1f} tok/s")
            save()

    if args.profile and left() > 40 and bf16_leg:
        try:
            res["kernel_profile"] = kernel_profiles(ckpt, kw, prompts, args.profile_batches or args.batches[:1])
        except Exception as e:
            res["kernel_profile"] = f"{type(e).__name__}: {e}"[:400]
        gc.collect()
        torch.cuda.empty_cache()
        save()

    # Quantized checkpoint, two legs: weights kept quantized on the GPU (FP8 GEMMs / MXFP4 MoE kernels) and
    # dequantized at load (bf16 kernels); LLM(quantized_weights=...) switches (runtime/loader/quantization.py).
    legs = [m for m in args.quant_modes] if quant != "none" else []
    if legs and left() > 60:
        qpath = ckpt.with_name(ckpt.name + "-" + quant)
        shutil.rmtree(qpath, ignore_errors=True)
        t0 = time.perf_counter()
        n = write_quantized(hf, quant, qpath)
        res[f"{quant}_checkpoint"] = {"quantized_tensors": n, "write_s": time.perf_counter() - t0,
                                      "bytes": sum(f.stat().st_size for f in qpath.glob("*.safetensors"))}
        log(res[f"{quant}_checkpoint"])
        warm_page_cache(qpath)
        for mode in legs:
            if left() < 50:
                res.setdefault("skipped_legs", []).append(mode)
                continue
            run_modelgen(qpath, f"modelgen_{quant}_{mode}", quantized_weights=mode)
        a, b = (res.get(f"modelgen_{quant}_{m}", {}).get("greedy_tokens") for m in ("keep", "dequantize"))
        if a and b:
            res[f"{quant}_keep_vs_dequantize_greedy_equal"] = sum(x == y for x, y in zip(a, b))
        shutil.rmtree(qpath, ignore_errors=True)

    # ------------------------------------------------------------------------------------------------- summary
    keys = ["modelgen"] + [f"modelgen_{quant}_{m}" for m in legs]
    ratios = {}
    for b in args.batches:
        r = {}
        for key in keys:
            m = res.get(key, {}).get("decode_tok_s", {}).get(str(b))
            if not m:
                continue
            r[f"{key}_of_roofline"] = m / res["roofline_tok_s"][str(b)]
            other = res.get("hf_eager", {}).get("decode_tok_s", {}).get(str(b))
            if other:
                r[f"{key}_vs_hf_eager"] = m / other
        ratios[str(b)] = r
    res["ratios"] = ratios
    res["roofline_note"] = "roofline_tok_s counts bf16 weights (the dequantized legs' bytes); a kept leg reads " \
                           "fewer (weight_bytes_on_gpu per leg)"
    m1 = res.get("modelgen", {}).get("decode_tok_s", {}).get("1")
    if m1:
        res["bs1_fraction_of_active_weight_roofline"] = m1 / res["active_weight_roofline_tok_s_bs1"]
    res["bench_wall_s"] = time.perf_counter() - t_start
    save()
    hf = None
    gc.collect()
    shutil.rmtree(ckpt, ignore_errors=True)
    print(f"\n{shape['name']} ({layers} layers) | batch | " + " | ".join(keys) + " | hf eager | roofline")
    for b in args.batches:
        g = lambda s: res.get(s, {}).get("decode_tok_s", {}).get(str(b))  # noqa: E731
        fmt = lambda v: f"{v:,.1f}" if v else "-"  # noqa: E731
        print(f"{b:5d} | " + " | ".join(fmt(g(k)) for k in keys) + f" | {fmt(g('hf_eager'))} | "
              f"{res['roofline_tok_s'][str(b)]:,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
