"""Checkpoints reusing the Llama architecture under another name: MistralForCausalLM without a window runs on the
Llama spec only when no Mistral spec is generated; the dedicated spec wins when it exists."""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.engine import registry
from modelgen.runtime.engine.llm import LLM

PROMPT = [1, 17, 42, 99, 3, 150, 64, 8]


def _mistral(path, sliding_window):
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                        sliding_window=sliding_window, bos_token_id=1, eos_token_id=2)
    model = MistralForCausalLM(cfg).eval()
    model.save_pretrained(path)
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0]


@pytest.fixture
def without_mistral_spec(monkeypatch):
    """The target index as if specs/mistral.yaml had never been built."""
    index = registry.model_index

    def no_mistral(target):
        return {a: m for a, m in index(target).items() if a != "MistralForCausalLM"}

    monkeypatch.setattr(registry, "model_index", no_mistral)


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_dedicated_spec_preferred(tmp_path, target):
    want = _mistral(tmp_path, None)
    llm = LLM(tmp_path, target=target, dtype="float32", max_model_len=64)
    assert llm.module.__name__ == f"modelgen.generated.{target}.mistral"
    torch.testing.assert_close(llm.score(PROMPT), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_llama_alias_without_a_window(tmp_path, target, without_mistral_spec):
    want = _mistral(tmp_path, None)
    llm = LLM(tmp_path, target=target, dtype="float32", max_model_len=64)
    assert llm.module.__name__ == f"modelgen.generated.{target}.llama"
    torch.testing.assert_close(llm.score(PROMPT), want, atol=1e-4, rtol=1e-4)


def test_llama_alias_refuses_a_window(tmp_path, without_mistral_spec):
    _mistral(tmp_path, 5)
    with pytest.raises(LookupError, match="MistralForCausalLM: no generated spec of its own.*sliding_window is null"
                                          ".*config.json has sliding_window 5"):
        LLM(tmp_path, dtype="float32", max_model_len=64)
    # a window no position reaches is full attention
    never_binding = {"sliding_window": 256, "max_position_embeddings": 256}
    assert registry.find_model(["MistralForCausalLM"], "rocm", never_binding).SPEC == "specs/llama.yaml"
