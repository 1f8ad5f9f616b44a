"""modelgen's vLLM plugin without vLLM: which architectures MODELGEN_VLLM_MODELS selects, its one-line refusals,
the fallback guard's rule, and the entry point pip installs (the same plugin inside real vLLM: tests/vllm/)."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from modelgen.runtime.vllm import plugin

ROOT = Path(__file__).resolve().parent.parent
AVAILABLE = {"LlamaForCausalLM": "llama", "NewArchForCausalLM": "new_arch", "Qwen3ForCausalLM": "qwen3"}
NATIVE = {"LlamaForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM"}


def test_missing_is_the_default_and_takes_only_what_vllm_lacks():
    assert plugin.selected(None, AVAILABLE, NATIVE) == {"NewArchForCausalLM": "new_arch"}
    assert plugin.selected(" missing ", AVAILABLE, NATIVE) == {"NewArchForCausalLM": "new_arch"}


def test_all_and_a_list():
    assert plugin.selected("all", AVAILABLE, NATIVE) == AVAILABLE
    assert plugin.selected("Qwen3ForCausalLM, LlamaForCausalLM", AVAILABLE, NATIVE) == {
        "Qwen3ForCausalLM": "qwen3", "LlamaForCausalLM": "llama"}


@pytest.mark.parametrize("value,message", [
    ("", "expected 'missing', 'all' or a comma list"),
    ("Llama,,Qwen3ForCausalLM", "expected 'missing', 'all' or a comma list"),
    ("LlamaForCausalLM,GPT2LMHeadModel", "GPT2LMHeadModel is not an architecture any modelgen spec names"),
    ("ALL", "ALL is not an architecture"),
])
def test_a_bad_value_is_refused_in_one_line(value, message):
    with pytest.raises(plugin.PluginConfigError, match=message) as e:
        plugin.selected(value, AVAILABLE, NATIVE)
    assert "\n" not in str(e.value) and plugin.ENV in str(e.value)


def test_the_index_lists_every_spec_and_each_package_names_its_class():
    models = plugin.generated_models()
    assert "LlamaForCausalLM" in models and "Qwen3NextForCausalLM" in models
    assert plugin.class_path(models["LlamaForCausalLM"]) == "modelgen.generated.vllm.llama.model:LlamaForCausalLM"


def test_fallback_to_another_class_is_an_error(monkeypatch):
    monkeypatch.setattr(plugin, "_claimed", {"LlamaForCausalLM": "modelgen.generated.vllm.llama.model:X"})

    class LlamaForCausalLM:  # what vLLM's own registry would build
        __module__ = "vllm.model_executor.models.llama"

    with pytest.raises(RuntimeError, match="vLLM resolved it to vllm.model_executor.models.llama"):
        plugin.check_built(["LlamaForCausalLM"], LlamaForCausalLM)

    class Ours:
        __module__ = "modelgen.generated.vllm.llama.model"

    plugin.check_built(["LlamaForCausalLM"], Ours)  # modelgen's class: fine
    plugin.check_built(["GPT2LMHeadModel"], LlamaForCausalLM)  # not claimed: vLLM's business


def test_entry_point_is_declared_and_the_plugin_module_is_light():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["vllm.general_plugins"] == {
        "modelgen": "modelgen.runtime.vllm.plugin:register"}
    code = ("import sys, modelgen.runtime.vllm.plugin as p; p.class_path(p.generated_models()['LlamaForCausalLM']); "
            "assert 'torch' not in sys.modules and 'vllm' not in sys.modules, sorted(sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
