"""No silent wrong output inside nested config mappings (issue 26 item 3; runtime/config_nesting.py): keys inside
``rope_parameters`` / ``rope_scaling`` / per-layer-type RoPE dicts are read, ignored, implemented for their
rope_type, or reported -- and a RoPE parameter the spec's reader does not implement is refused by name."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from modelgen.runtime.config_nesting import nested_unread_keys
from modelgen.runtime.hf_config import ConfigError, ConfigKeysWarning


def test_sub_keys_read_ignored_implemented_or_reported():
    read = ("rope_parameters", "rope_parameters.rope_theta", "gates.alpha")
    cfg = {
        "rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        "gates": {"alpha": 1, "beta": 2, "skip": {"x": 1}},  # reached by a dotted read only: beta is unread
        "other": {"deep": 1},  # never read: the top-level check's business, not this walk's
    }
    assert nested_unread_keys(cfg, read, ("gates.skip",)) == (["gates.beta"], [])


def test_a_parameter_the_rope_type_does_not_implement_is_unimplemented():
    read = ("rope_parameters", "rope_parameters.rope_theta")
    hunyuan = {"rope_parameters": {"rope_type": "dynamic", "factor": 1.0, "alpha": 1000.0, "rope_theta": 1e4}}
    assert nested_unread_keys(hunyuan, read) == ([], ["rope_parameters.alpha"])
    partial = {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}}
    assert nested_unread_keys(partial, read) == ([], ["rope_parameters.partial_rotary_factor"])
    # read by its own dotted key (StableLM, Phi-3): implemented
    assert nested_unread_keys(partial, read + ("rope_parameters.partial_rotary_factor",)) == ([], [])
    # an unknown rope_type is refused by runtime/ops/rope.py itself, by name; nothing to say about its keys here
    assert nested_unread_keys({"rope_parameters": {"rope_type": "longrope", "short_factor": [1]}}, read) == ([], [])


def test_per_layer_type_rope_dicts_are_walked():
    """Gemma 3: rope_parameters.{sliding_attention, full_attention}, each read whole."""
    read = ("rope_parameters.full_attention", "rope_parameters.full_attention.rope_theta",
            "rope_parameters.sliding_attention", "rope_parameters.sliding_attention.rope_theta")
    cfg = {"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4, "beta_fast": 3}}}
    assert nested_unread_keys(cfg, read) == ([], ["rope_parameters.sliding_attention.beta_fast"])


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint

    d = tmp_path_factory.mktemp("tiny_llama")
    make_tiny_checkpoint(d, "LlamaForCausalLM", num_hidden_layers=2)
    return d


def _with_rope(src: Path, dst: Path, rope: dict) -> Path:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["rope_parameters"] = rope
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("target", ["rocm", "neuron"])
@pytest.mark.parametrize("rope, key", [
    ({"rope_type": "dynamic", "factor": 2.0, "alpha": 1000.0, "rope_theta": 1e4}, "rope_parameters.alpha"),  # HunYuan
    ({"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}, "rope_parameters.partial_rotary_factor"),
])
def test_run_refuses_an_unimplemented_rope_parameter_by_name(tiny_llama, tmp_path, target, rope, key):
    """Refused even without --strict-config: the spec reads the mapping, so dropping the parameter is wrong output."""
    from modelgen.runtime.engine.llm import LLM

    d = _with_rope(tiny_llama, tmp_path / "ck", rope)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        LLM(d, target=target, dtype="float32", max_model_len=64)


def test_implemented_rope_parameters_load_quietly(tiny_llama, tmp_path):
    from modelgen.runtime.engine.llm import LLM

    d = _with_rope(tiny_llama, tmp_path / "ck", {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 32})
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigKeysWarning)
        LLM(d, target="rocm", dtype="float32", max_model_len=64, strict_config=True)
