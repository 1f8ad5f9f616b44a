"""The mamba2 kind's vllm target (runtime/layers/mamba2/vllm.py over vLLM's MambaMixer2), served by real vLLM.

vLLM's CPU build runs Mamba-2 but drifts from transformers after a few decode steps (README "Serving with vLLM";
test_vllm_parity.CPU_UNSUPPORTED), so the generated Mamba2ForCausalLM is held to vLLM's own: served on the same tiny
checkpoint, both give the same greedy tokens (vLLM's own class in a child process that leaves the architecture to
vLLM). Bamba, which vLLM no longer ships, and Nemotron-H (one-sub-layer blocks) are built, served and
strict-loaded. A time_step_limit vLLM's kernels would
not apply is refused by name.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

vllm = pytest.importorskip("vllm")

from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt  # noqa: E402
from tests.vllm.harness import serve  # noqa: E402

PROMPTS = [tiny_prompt(), tiny_prompt(seed=3, length=40)]
# head_dim 32 (vLLM's CPU kernels want >= 32): 8 heads * 32 = expand 2 * hidden 128; biases on
MAMBA2 = dict(hidden_size=128, head_dim=32, use_bias=True, initializer_range=0.1)
NATIVE = """
import json, sys
from tests.vllm.harness import serve
served = serve(sys.argv[1], json.loads(sys.argv[2]), max_tokens=8)
print("RESULT " + json.dumps([served.model_class, served.tokens]))
"""


def _native(path) -> tuple[str, list[list[int]]]:
    """vLLM's own class on ``path`` (MODELGEN_VLLM_MODELS=missing: modelgen claims only what vLLM lacks)."""
    env = {**os.environ, "MODELGEN_VLLM_MODELS": "missing", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}
    out = subprocess.run([sys.executable, "-c", NATIVE, str(path), json.dumps(PROMPTS)], env=env, cwd=os.getcwd(),
                         capture_output=True, text=True, timeout=600)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, out.stderr[-3000:]
    cls, tokens = json.loads(line[len("RESULT "):])
    return cls, tokens


def test_generated_mamba2_equals_vllms_own(tmp_path):
    make_tiny_checkpoint(tmp_path, "Mamba2ForCausalLM", **MAMBA2)
    ours = serve(tmp_path, PROMPTS, max_tokens=8)
    assert ours.model_class == "modelgen.generated.vllm.mamba2.model:Mamba2ForCausalLM", ours.model_class
    cls, tokens = _native(tmp_path)
    assert cls == "vllm.model_executor.models.mamba2:Mamba2ForCausalLM", cls
    assert ours.tokens == tokens and all(len(t) == 8 for t in tokens)


def test_bamba_is_served(tmp_path):
    make_tiny_checkpoint(tmp_path, "BambaForCausalLM", hidden_size=128, mamba_d_head=32, attn_layer_indices=[1, 3],
                         mamba_proj_bias=True)
    served = serve(tmp_path, PROMPTS, max_tokens=8)
    assert served.model_class == "modelgen.generated.vllm.bamba.model:BambaForCausalLM", served.model_class
    assert all(len(t) == 8 for t in served.tokens)


def test_nemotron_h_is_served(tmp_path):
    """One-sub-layer blocks on vLLM: Mamba-2 mixers, NoPE attention (head_dim 32) and a ReLU^2 MLP block."""
    make_tiny_checkpoint(tmp_path, "NemotronHForCausalLM", hidden_size=128, head_dim=32, mamba_head_dim=32,
                         layers_block_type=["linear_attention", "mlp", "full_attention", "linear_attention"])
    served = serve(tmp_path, PROMPTS, max_tokens=8)
    assert served.model_class == "modelgen.generated.vllm.nemotron_h.model:NemotronHForCausalLM", served.model_class
    assert all(len(t) == 8 for t in served.tokens)


def test_a_time_step_limit_vllm_does_not_apply_is_refused(tmp_path):
    make_tiny_checkpoint(tmp_path, "Mamba2ForCausalLM", **MAMBA2, time_step_limit=(0.05, 0.3))
    with pytest.raises(Exception, match=r"time_step_limit \(0\.05, 0\.3\) is not applied by vLLM"):
        serve(tmp_path, PROMPTS[:1], max_tokens=2)


def test_nemotron_h_moe_is_served_or_skipped_with_vllms_reason(tmp_path):
    """Nemotron-H's MoE layer on vLLM: FusedMoEFactory with activation relu2_no_mul (non-gated experts), the grouped
    sigmoid router with its correction bias, the non-gated shared expert. vLLM's CPU experts implement no non-gated
    activation (CPUUnquantizedExperts._supports_no_act_and_mul is False): where vLLM refuses the layer for that
    reason the test is skipped, saying so; where it serves, the tokens come from modelgen's class."""
    make_tiny_checkpoint(tmp_path, "NemotronHForCausalLM", hidden_size=128, head_dim=32, mamba_head_dim=32,
                         layers_block_type=["linear_attention", "moe", "full_attention", "mlp"])
    try:
        served = serve(tmp_path, PROMPTS, max_tokens=8)
    except Exception as e:  # noqa: BLE001 - only vLLM's own refusal of non-gated experts skips
        if "is_act_and_mul=False is supported only" in str(e):
            pytest.skip(f"vLLM's CPU fused MoE cannot run non-gated (relu2_no_mul) experts: {str(e)[:200]}")
        raise
    assert served.model_class == "modelgen.generated.vllm.nemotron_h.model:NemotronHForCausalLM", served.model_class
    assert all(len(t) == 8 for t in served.tokens)
