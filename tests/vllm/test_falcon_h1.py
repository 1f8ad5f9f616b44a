"""Falcon-H1 on the vllm target (specs/falcon_h1.yaml: every layer vLLM's MambaMixer2 beside its Attention, summed),
served by real vLLM.

On a tiny checkpoint with every muP multiplier away from 1, the gated norm on and biases in every projection, the
generated class gives transformers' greedy tokens. vLLM ships its own FalconH1ForCausalLM, which departs from
transformers on that checkpoint (its projection biases); without them, the generated class and vLLM's own (in a
child process that leaves the architecture to vLLM) give the same tokens. The gated norm runs after the gate there
(vLLM's Mixer2RMSNormGated has no other order), so the fixture sets mamba_norm_before_gate false, and the generated
model refuses by name a checkpoint with the norm before the gate, which vLLM's own class would serve silently wrong.
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
# head_dim 32 for both mixers (vLLM's CPU kernels want >= 32): 8 Mamba heads * 32 = mamba_d_ssm 256, 4 attention
# heads * 32 = hidden 128
FALCON_H1 = dict(hidden_size=128, mamba_d_ssm=256, mamba_d_head=32, initializer_range=0.1, mamba_rms_norm=True,
                 mamba_norm_before_gate=False, mamba_proj_bias=True, projectors_bias=True, attention_bias=True,
                 embedding_multiplier=1.7, lm_head_multiplier=0.6, attention_in_multiplier=0.8,
                 attention_out_multiplier=1.3, key_multiplier=1.5, ssm_in_multiplier=1.2, ssm_out_multiplier=0.7,
                 ssm_multipliers=[0.9, 1.1, 1.2, 0.8, 1.3], mlp_multipliers=[1.2, 0.75])
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


def test_generated_falcon_h1_equals_transformers(tmp_path):
    """Every multiplier, the gated norm and every projection bias: the generated class's greedy tokens are
    transformers' (teacher-forced full forwards)."""
    from tests.parity_helpers import hf_greedy_forward

    hf = make_tiny_checkpoint(tmp_path, "FalconH1ForCausalLM", **FALCON_H1)
    ours = serve(tmp_path, PROMPTS, max_tokens=8)
    assert ours.model_class == "modelgen.generated.vllm.falcon_h1.model:FalconH1ForCausalLM", ours.model_class
    assert ours.tokens == [hf_greedy_forward(hf, p, 8) for p in PROMPTS]


def test_generated_falcon_h1_equals_vllms_own(tmp_path):
    """Without projection biases (vLLM 0.32's own FalconH1ForCausalLM departs from transformers when they are on --
    the case above): the generated class and vLLM's give the same greedy tokens."""
    make_tiny_checkpoint(tmp_path, "FalconH1ForCausalLM",
                         **{**FALCON_H1, "mamba_proj_bias": False, "projectors_bias": False, "attention_bias": False})
    ours = serve(tmp_path, PROMPTS, max_tokens=8)
    cls, tokens = _native(tmp_path)
    assert cls == "vllm.model_executor.models.falcon_h1:FalconH1ForCausalLM", cls
    assert ours.tokens == tokens and all(len(t) == 8 for t in tokens)


@pytest.mark.parametrize("overrides, message", [
    (dict(mamba_norm_before_gate=True), r"norm_before_gate .* is not what vLLM's gated norm computes"),
    (dict(mamba_proj_bias=False), r"an out_proj bias \(True\) unlike in_proj's \(False\) is not built by vLLM"),
])
def test_what_vllms_mixer_cannot_compute_is_refused(tmp_path, overrides, message):
    make_tiny_checkpoint(tmp_path, "FalconH1ForCausalLM", **{**FALCON_H1, **overrides})
    with pytest.raises(Exception, match=message):
        serve(tmp_path, PROMPTS[:1], max_tokens=2)
