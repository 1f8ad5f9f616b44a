"""The shared_block kind's vllm target (specs/zamba2.yaml), served by real vLLM.

vLLM's CPU Mamba-2 drifts from transformers after a few decode steps (tests/vllm/test_mamba2.py), so the generated
Zamba2ForCausalLM is held to vLLM's own Zamba2ForCausalLM: served on the same tiny checkpoint (shared blocks with
q/k/v and gate_up adapters, two copies over three hybrid layers, mem RoPE), both give the same greedy tokens (vLLM's
own class in a child process). Its checkpoint sets time_step_min 0: transformers clamps the prefill dt to
(time_step_min, inf), which vLLM's Mamba-2 kernels do not apply, so the default 0.001 is refused by name (vLLM's own
class serves it unclamped). vLLM's own class always ties the LM head and the shared copies, reads no
num_key_value_heads and takes rms_norm_eps for the mixers' gated norm (transformers: 1e-5): the checkpoint is tied,
MHA and at eps 1e-5 so the two classes compute the same model.
"""
from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm")

import json  # noqa: E402

from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint  # noqa: E402
from tests.vllm.harness import serve  # noqa: E402
from tests.vllm.test_mamba2 import PROMPTS, _native  # noqa: E402

# attention head_dim 2 * 128 / 8 = 32 and Mamba head width 2 * 128 / 8 = 32 (vLLM's CPU kernels want >= 32)
ZAMBA2 = dict(hidden_size=128, num_attention_heads=8, num_key_value_heads=8, n_mamba_heads=8, rms_norm_eps=1e-5,
              tie_word_embeddings=True, use_shared_attention_adapter=True, use_mem_rope=True, initializer_range=0.1)


def _with_time_step_min(path, value: float) -> None:
    """Zamba2's dt_bias initialisation takes log(time_step_min), so a 0 is written into config.json after saving."""
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "time_step_min": value}))


def test_generated_zamba2_equals_vllms_own(tmp_path):
    make_tiny_checkpoint(tmp_path, "Zamba2ForCausalLM", **ZAMBA2)
    _with_time_step_min(tmp_path, 0.0)
    ours = serve(tmp_path, PROMPTS, max_tokens=8)
    assert ours.model_class == "modelgen.generated.vllm.zamba2.model:Zamba2ForCausalLM", ours.model_class
    cls, tokens = _native(tmp_path)
    assert cls == "vllm.model_executor.models.zamba2:Zamba2ForCausalLM", cls
    assert ours.tokens == tokens and all(len(t) == 8 for t in tokens)


def test_a_time_step_min_vllm_does_not_apply_is_refused(tmp_path):
    make_tiny_checkpoint(tmp_path, "Zamba2ForCausalLM", **ZAMBA2)  # time_step_min 0.001: transformers' default
    with pytest.raises(Exception, match=r"time_step_limit \(0\.001, inf\) is not applied by vLLM"):
        serve(tmp_path, PROMPTS[:1], max_tokens=2)
