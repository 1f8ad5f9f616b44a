"""Strict loading inside real vLLM (FP8 checkpoints that do load: test_vllm_fp8.py): a checkpoint tensor the generated tables neither map nor ignore, or a missing
one, stops the engine with an error naming the tensor (vLLM's own loaders would skip it silently), and a bad
MODELGEN_VLLM_MODELS value stops it in one line. Each case runs in a fresh process: a failed engine start leaves
vLLM's process-wide state half set up."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from safetensors.torch import load_file, save_file  # noqa: E402

from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys, vllm
if __name__ == "__main__":
    vllm.LLM(model=sys.argv[1], skip_tokenizer_init=True, dtype="float32", max_model_len=128, enforce_eager=True,
             kv_cache_memory_bytes=1 << 24)
    print("STARTED")
"""


def _start(path: Path, script: str = SCRIPT, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, str(path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", **env})


@pytest.fixture
def llama(tmp_path):
    make_tiny_checkpoint(tmp_path, "LlamaForCausalLM", head_dim=32)
    return tmp_path


def _edit(path: Path, edit) -> None:
    tensors = load_file(path / "model.safetensors")
    edit(tensors)
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})


def test_an_unmapped_tensor_is_named(llama):
    _edit(llama, lambda t: t.__setitem__("model.layers.0.mlp.extra_proj.weight", t["model.norm.weight"].clone()))
    r = _start(llama, MODELGEN_VLLM_MODELS="all")
    assert r.returncode != 0 and "STARTED" not in r.stdout
    assert "checkpoint tensors used by no parameter (unexpected" in r.stderr, r.stderr[-3000:]
    assert "model.layers.0.mlp.extra_proj.weight" in r.stderr


def test_a_missing_tensor_is_named(llama):
    _edit(llama, lambda t: t.pop("model.layers.1.self_attn.k_proj.weight"))
    r = _start(llama, MODELGEN_VLLM_MODELS="all")
    assert r.returncode != 0
    assert "parameters with no checkpoint tensor (missing)" in r.stderr, r.stderr[-3000:]
    assert "model.layers.1.self_attn.qkv_proj.weight (shard 'k')" in r.stderr


def test_a_bad_selection_is_refused_in_one_line(llama):
    r = _start(llama, MODELGEN_VLLM_MODELS="LlamaForCausalLM,NoSuchForCausalLM")
    assert r.returncode != 0
    assert ("MODELGEN_VLLM_MODELS='LlamaForCausalLM,NoSuchForCausalLM': NoSuchForCausalLM is not an architecture "
            "any modelgen spec names") in r.stderr, r.stderr[-3000:]


def test_vllms_own_model_when_modelgen_does_not_claim_it(llama):
    """The default (missing): vLLM has LlamaForCausalLM, so modelgen leaves it alone and the extra tensor is
    vLLM's business (its loader skips nothing here: the checkpoint is clean)."""
    r = _start(llama, MODELGEN_VLLM_MODELS="missing")
    assert r.returncode == 0 and "STARTED" in r.stdout, r.stderr[-3000:]
    assert "modelgen serves LlamaForCausalLM" not in r.stderr


def test_a_fallback_to_the_transformers_backend_is_an_error(llama):
    script = SCRIPT.replace("kv_cache_memory_bytes=1 << 24)", "kv_cache_memory_bytes=1 << 24, model_impl='transformers')")
    r = subprocess.run([sys.executable, "-c", script, str(llama)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                                         "MODELGEN_VLLM_MODELS": "all"})
    assert r.returncode != 0
    assert "modelgen registered LlamaForCausalLM" in r.stderr and "but vLLM resolved it to" in r.stderr, \
        r.stderr[-3000:]


def test_a_quantized_checkpoint_is_refused_in_one_line(llama):
    import json

    config = json.loads((llama / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4"}
    (llama / "config.json").write_text(json.dumps(config))
    r = _start(llama, SCRIPT.replace('"float32"', '"bfloat16"'), MODELGEN_VLLM_MODELS="all")
    assert r.returncode != 0 and "STARTED" not in r.stdout
    assert ("quantization_config.quant_method 'mxfp4' is not supported by modelgen's vllm target "
            "(supported: fp8)") in r.stderr, r.stderr[-3000:]
