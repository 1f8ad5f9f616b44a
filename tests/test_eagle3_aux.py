"""EAGLE3 auxiliary hidden states on the neuron target (the vLLM Neuron guide, step 1e and its forward table): the
hidden states entering the declared layers, threaded through every return mode, equal transformers'
``output_hidden_states`` at those layers."""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.work import Work
from tests.llama_fixtures import make_llama
from tests.moe_fixtures import make_moe

PROMPT = [1, 17, 42, 99, 3, 150, 64, 8]


def _forward_inputs(llm):
    llm.blocks.ensure(0, len(PROMPT))
    kwargs, n = llm.runner.build_inputs([Work(0, PROMPT, 0)])
    return kwargs


@pytest.mark.parametrize("case", ["llama", "qwen3_moe"])
def test_aux_hidden_states_in_every_return_mode_equal_transformers(tmp_path, case):
    if case == "llama":
        hf = make_llama(tmp_path, "gqa", num_hidden_layers=4)
    else:
        hf = make_moe(tmp_path, "qwen3_moe_norm", num_hidden_layers=4)
    with torch.no_grad():
        want = hf(torch.tensor([PROMPT]), output_hidden_states=True).hidden_states
    llm = LLM(tmp_path, target="neuron", dtype="float32", max_model_len=64)
    model = llm.model
    layers = (0, 1, 3)
    kwargs = _forward_inputs(llm)
    with torch.inference_mode():
        plain = model(**kwargs)  # no layers declared: the plain return
    assert isinstance(plain, torch.Tensor)
    model.set_aux_hidden_state_layers(layers)
    H = hf.config.hidden_size
    n = len(PROMPT)
    with torch.inference_mode():
        logits, aux = model(**kwargs)  # CPU sampling + EAGLE3: (logits, aux_hidden_states)
        rows = kwargs["sampling_positions"].shape[0]
        params = torch.tensor([[0, 1.0, 0.0]] * rows)  # greedy on-device sampling
        tokens, aux_ods, logits_ods = model(**{**kwargs, "sampling_params": params})  # ODS + EAGLE3
    torch.testing.assert_close(logits, plain)
    torch.testing.assert_close(logits_ods, plain)
    assert tokens[0].item() == plain[0].argmax().item()
    assert aux.shape == (kwargs["input_ids"].shape[0], len(layers) * H)
    torch.testing.assert_close(aux_ods, aux)
    for j, i in enumerate(layers):
        torch.testing.assert_close(aux[:n, j * H:(j + 1) * H], want[i][0], atol=1e-5, rtol=1e-5)
    model.set_aux_hidden_state_layers(())
    with torch.inference_mode():
        assert isinstance(model(**kwargs), torch.Tensor)


def test_layer_indices_are_checked_and_defaults_follow_vllm(tmp_path):
    make_llama(tmp_path, "gqa", num_hidden_layers=6)
    model = LLM(tmp_path, target="neuron", dtype="float32", max_model_len=64).model
    assert model.get_eagle3_aux_hidden_state_layers() == (2, 3, 3)
    with pytest.raises(ValueError, match=r"aux hidden state layers \[6\]: expected indices in \[0, 6\)"):
        model.set_aux_hidden_state_layers((0, 6))
