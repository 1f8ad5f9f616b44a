"""The vLLM Neuron factory/config contract: NeuronConfig, ``Config.from_configs(hf_config, neuron_config)`` with a
``neuron_config`` field, ``Factory(hf_config, neuron_config)`` validating, selecting and delegating ``forward``, and
``LLM(target="neuron")`` building its model through the factory."""
from __future__ import annotations

import json

import pytest
import torch

from modelgen.runtime.engine.llm import LLM
from modelgen.runtime.targets.neuron import NeuronConfig, OnDeviceSamplingConfig
from tests.llama_fixtures import make_llama

PROMPT = [1, 17, 42, 99, 3, 150, 64, 8]


def _module(name):
    import importlib

    return importlib.import_module(f"modelgen.generated.neuron.{name}")


def test_neuron_config_validates_its_fields():
    c = NeuronConfig(tp_degree=4, ep_degree=2, max_num_seqs=4, max_model_len=128, num_seqs_buckets=(1, 4),
                     num_batched_tokens_buckets=(16, 128), on_device_sampling_config=OnDeviceSamplingConfig())
    assert c.on_device_sampling and c.data_parallel == {}
    assert NeuronConfig(tp_degree=4, attention_dp_size=2).data_parallel == {"attention_dp_size": 2}
    for bad, match in [(dict(tp_degree=0), "tp_degree = 0"), (dict(tp_degree=4, ep_degree=3), "ep_degree 3 does not"),
                       (dict(tp_degree=4, mlp_dp_size=3), "mlp_dp_size 3 does not divide"),
                       (dict(max_model_len=64, num_batched_tokens_buckets=(16, 128)), "bucket 128 exceeds"),
                       (dict(max_num_seqs=2, num_seqs_buckets=(1, 4)), "bucket 4 exceeds max_num_seqs 2"),
                       (dict(pad_token_id=-1), "pad_token_id = -1")]:
        with pytest.raises(ValueError, match=match):
            NeuronConfig(**bad)


def test_from_engine_reads_the_llm_arguments():
    args = dict(max_num_seqs=4, max_model_len=None, prefill_buckets=[16, 64], decode_buckets=[1, 4],
                on_device_sampling=True, compile=True, block_size=8)
    c = NeuronConfig.from_engine(args, {"max_position_embeddings": 64, "pad_token_id": 5, "vocab_size": 160},
                                 tp_degree=2, ep_degree=None, dtype="float32")
    assert (c.max_model_len, c.num_batched_tokens_buckets, c.num_seqs_buckets) == (64, (16, 64), (1, 4))
    assert c.block_size == 8
    assert c.on_device_sampling and c.compile and c.pad_token_id == 5 and c.tp_degree == 2
    # a pad id outside the vocabulary (configs write -1 or vocab_size) pads with 0 instead
    assert NeuronConfig.from_engine({}, {"pad_token_id": 160, "vocab_size": 160}, tp_degree=1, ep_degree=None,
                                    dtype="float32").pad_token_id == 0


def test_config_from_configs_carries_the_neuron_config(tmp_path):
    make_llama(tmp_path, "gqa")
    hf = json.loads((tmp_path / "config.json").read_text())
    mod = _module("llama")
    nc = NeuronConfig(tp_degree=1, max_model_len=64)
    cfg = mod.CONFIG_CLASS.from_configs(hf, nc)
    assert cfg.neuron_config is nc
    assert cfg == mod.CONFIG_CLASS.from_hf_config(hf)  # the HF fields are the same; neuron_config is not compared
    assert mod.CONFIG_CLASS.from_hf_config(hf).neuron_config is None


def test_factory_validates_selects_and_delegates(tmp_path):
    from modelgen.runtime.work import Work
    from modelgen.runtime.kv_cache import allocate_kv_cache

    make_llama(tmp_path, "gqa")
    hf = json.loads((tmp_path / "config.json").read_text())
    mod = _module("llama")
    factory_cls = mod.FACTORY_CLASS
    nc = NeuronConfig(tp_degree=1, max_model_len=64)
    model = factory_cls.from_configs(hf, nc)  # the implementation itself (checkpoint-mapped parameter names)
    assert type(model) is mod.MODEL_CLASS and model.config.neuron_config is nc
    wrapper = factory_cls(hf, nc)  # vLLM's registry form: wraps the selected model and delegates forward
    assert isinstance(wrapper._model, mod.MODEL_CLASS)
    assert factory_cls(hf, None)._model.config.neuron_config is None  # Factory(cfg, None) builds, as the guide's does
    llm = LLM(tmp_path, target="neuron", dtype="float32", max_model_len=64)
    wrapper._model.load_state_dict(llm.model.state_dict())
    wrapper._model.bind_kv_cache(allocate_kv_cache(wrapper._model.get_kv_spec(), llm.blocks.num_blocks, 16, "cpu"))
    llm.blocks.ensure(0, len(PROMPT))
    kwargs, n = llm.runner.build_inputs([Work(0, PROMPT, 0)])
    with torch.inference_mode():
        torch.testing.assert_close(wrapper(**kwargs)[:n], llm.model(**kwargs)[:n], atol=0, rtol=0)
    serves = r"LlamaForCausalLMFactory serves .*LlamaForCausalLM.*not \['MistralForCausalLM'\]"
    with pytest.raises(ValueError, match=serves):
        factory_cls.from_configs({**hf, "architectures": ["MistralForCausalLM"]}, nc)
    with pytest.raises(ValueError, match="component data parallelism {'attention_dp_size': 2} is not generated"):
        factory_cls.from_configs(hf, NeuronConfig(tp_degree=2, attention_dp_size=2))


def test_llm_goes_through_the_factory(tmp_path, monkeypatch):
    make_llama(tmp_path, "gqa")
    mod = _module("llama")
    seen = []
    original = mod.FACTORY_CLASS._validate_config.__func__

    def spy(cls, hf_config, neuron_config):
        seen.append(neuron_config)
        return original(cls, hf_config, neuron_config)

    monkeypatch.setattr(mod.FACTORY_CLASS, "_validate_config", classmethod(spy))
    llm = LLM(tmp_path, target="neuron", dtype="float32", max_model_len=64, max_num_seqs=2, decode_buckets=[1, 2],
              on_device_sampling=True)
    assert len(seen) == 1 and isinstance(seen[0], NeuronConfig)
    nc = llm.model.config.neuron_config
    assert nc is seen[0]
    assert (nc.max_model_len, nc.max_num_seqs, nc.num_seqs_buckets, nc.tp_degree) == (64, 2, (1, 2), 1)
    assert nc.on_device_sampling and nc.torch_dtype == "float32"
