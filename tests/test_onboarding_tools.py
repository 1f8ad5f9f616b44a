"""No silent wrong output (issue 14 item 6) and coverage (item 5): unread config keys, broken specs in build/check/
list, stale generated code refused by run, header-only checkpoint coverage."""
from __future__ import annotations

import functools
import json
import shutil
import types
from pathlib import Path

import pytest

from modelgen.codegen import build as build_module
from modelgen.codegen import render as render_module
from modelgen.codegen.build import BrokenSpecs, build, check
from modelgen.cli import main
from modelgen.codegen.freshness import stale_reason
from modelgen.codegen.spec_file import REPO_ROOT
from modelgen.runtime.hf_config import ConfigError, ConfigKeysWarning, GENERIC_CONFIG_KEYS, unread_config_keys

SPECS = REPO_ROOT / "specs"


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint

    d = tmp_path_factory.mktemp("tiny_llama")
    make_tiny_checkpoint(d, "LlamaForCausalLM", num_hidden_layers=2)
    return d


def _copy_with_config(src: Path, dst: Path, **extra) -> Path:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(extra)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


# ------------------------------------------------------------------------------------------------ unread config keys
def test_unread_config_keys_counts_dotted_reads_generic_and_ignored_keys():
    cfg = {"hidden_size": 1, "rope_parameters": {}, "use_cache": True, "pretraining_tp": 1, "residual_multiplier": 2}
    assert unread_config_keys(cfg, ("hidden_size", "rope_parameters.rope_theta"), ("pretraining_tp",)) == [
        "residual_multiplier"]
    assert "use_cache" in GENERIC_CONFIG_KEYS and "hidden_act" not in GENERIC_CONFIG_KEYS


def test_generated_configs_expose_the_keys_they_read():
    from modelgen.generated.rocm.llama import CONFIG_CLASS

    assert {"hidden_size", "rope_theta", "rope_parameters.rope_theta", "hidden_act"} <= set(CONFIG_CLASS.CONFIG_KEYS_READ)
    assert "pretraining_tp" in CONFIG_CLASS.CONFIG_KEYS_IGNORED


def test_a_config_key_the_spec_does_not_read_warns_naming_it(tiny_llama, tmp_path):
    from modelgen.runtime.engine.llm import LLM

    d = _copy_with_config(tiny_llama, tmp_path / "ck", residual_multiplier=0.22, pretraining_tp=1)
    with pytest.warns(ConfigKeysWarning, match=r"residual_multiplier") as record:
        LLM(d, dtype="float32", max_model_len=32)
    assert "pretraining_tp" not in str(record[0].message)  # listed under llama's config_ignore
    with pytest.raises(ConfigError, match=r"specs/llama.yaml neither reads nor ignores: residual_multiplier"):
        LLM(d, dtype="float32", max_model_len=32, strict_config=True)


def test_a_checkpoint_with_only_known_keys_is_quiet(tiny_llama, recwarn):
    from modelgen.runtime.engine.llm import LLM

    LLM(tiny_llama, dtype="float32", max_model_len=32)
    assert not [w for w in recwarn if issubclass(w.category, ConfigKeysWarning)]


def test_run_warns_and_strict_config_fails(tiny_llama, tmp_path, capsys):
    d = _copy_with_config(tiny_llama, tmp_path / "ck", embedding_multiplier=12.0)
    args = ["run", "--checkpoint", str(d), "--prompt-ids", "5,6,7", "--max-new-tokens", "2", "--no-stream"]
    assert main(args) == 0
    assert "modelgen run: warning:" in capsys.readouterr().err
    assert main(args + ["--strict-config"]) == 1
    err = capsys.readouterr().err
    assert "embedding_multiplier" in err and "--strict-config" in err


def test_hidden_act_the_spec_does_not_generate_is_refused(tiny_llama, tmp_path):
    from modelgen.runtime.engine.llm import LLM

    d = _copy_with_config(tiny_llama, tmp_path / "ck", hidden_act="gelu")
    with pytest.raises(ConfigError, match="hidden_act other than silu"):
        LLM(d, dtype="float32", max_model_len=32)


# --------------------------------------------------------------------------------------- broken specs: build / check
@pytest.fixture()
def spec_tree(tmp_path, monkeypatch) -> Path:
    """specs/ holding llama, qwen3 (extends llama) and a broken spec; generated/ built from the first two."""
    specs = tmp_path / "specs"
    specs.mkdir()
    for name in ("llama.yaml", "qwen3.yaml"):
        shutil.copy(SPECS / name, specs / name)
    monkeypatch.setattr(build_module, "SPECS_DIR", specs)
    monkeypatch.setattr(render_module, "SPECS_DIR", specs)
    build(build_module.all_specs(), render_module.TARGETS, out_dir=tmp_path / "generated")
    (specs / "broken.yaml").write_text("extends: llama.yaml\nname: broken\nclass_prefix: Broken\ndescription: x\n"
                                       "hf: {architectures: [BrokenForCausalLM], model_type: broken, modeling: x.py}\n"
                                       "layers: {count: num_hiden_layers}\n")
    return tmp_path


def test_build_with_a_broken_spec_builds_the_others_and_names_it(spec_tree):
    qwen3 = spec_tree / "specs" / "qwen3.yaml"
    qwen3.write_text(qwen3.read_text().replace("description: Dense", "description: A dense"))  # a change to write
    with pytest.raises(BrokenSpecs) as e:
        build(build_module.all_specs(), ("rocm",), out_dir=spec_tree / "generated", keep_going=True)
    assert [p.name for p in e.value.broken] == ["broken.yaml"]
    assert "broken.yaml:6:" in str(e.value) and "num_hiden_layers" in str(e.value)
    assert spec_tree / "generated" / "rocm" / "qwen3" / "README.md" in e.value.written
    assert not (spec_tree / "generated" / "rocm" / "broken").exists()


def test_check_reports_the_broken_spec_and_still_compares_the_others(spec_tree, monkeypatch, capsys):
    out = spec_tree / "generated"
    diffs = check(out)
    assert len(diffs) == 1 and diffs[0].startswith("broken: ") and "broken.yaml" in diffs[0]
    (out / "rocm" / "qwen3" / "config.py").write_text("# edited\n")
    diffs = check(out)
    assert any(d.startswith("stale: generated/rocm/qwen3/config.py") for d in diffs)
    monkeypatch.setattr(build_module, "check", functools.partial(check, out))
    assert main(["check"]) == 1
    err = capsys.readouterr().err
    assert "1 spec(s) do not build:" in err and "broken.yaml" in err


def test_list_lists_the_others_beside_a_broken_spec(spec_tree, capsys):
    assert main(["list"]) == 0
    captured = capsys.readouterr()
    assert "LlamaForCausalLM" in captured.out and "Qwen3ForCausalLM" in captured.out
    assert "broken.yaml does not build" in captured.err


# ------------------------------------------------------------------------------------------- stale generated code
def _fake_package(tmp_path: Path, spec: str, banner_hash: str) -> types.ModuleType:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"# source hash (spec + templates + generator): {banner_hash}\n")
    module = types.ModuleType("pkg")
    module.__file__ = str(pkg / "__init__.py")
    module.SPEC = spec
    return module


def test_generated_packages_are_fresh():
    from modelgen.generated.neuron import qwen3 as neuron_qwen3
    from modelgen.generated.rocm import llama

    assert stale_reason(llama) is None and stale_reason(neuron_qwen3) is None


def test_stale_banner_is_refused_by_run(tmp_path, tiny_llama, monkeypatch, capsys):
    module = _fake_package(tmp_path, "specs/llama.yaml", "0123456789abcdef")
    reason = stale_reason(module)
    assert "stale" in reason and "0123456789abcdef" in reason and "modelgen build specs/llama.yaml" in reason
    from modelgen.runtime.engine import registry

    monkeypatch.setattr(registry, "find_model", lambda *args: module)
    assert main(["run", "--checkpoint", str(tiny_llama), "--prompt-ids", "5,6"]) == 1
    assert "is stale" in capsys.readouterr().err


def test_generated_code_of_a_spec_that_no_longer_builds_is_refused(tmp_path, monkeypatch):
    from modelgen.codegen import freshness

    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "x.yaml").write_text("name: x\n")
    monkeypatch.setattr(freshness, "REPO_ROOT", tmp_path)
    reason = stale_reason(_fake_package(tmp_path, "specs/x.yaml", "0123456789abcdef"))
    assert "no longer builds" in reason and "specs/x.yaml" in reason


# -------------------------------------------------------------------------------------------------------- coverage
def _rewrite(path: Path, edit) -> None:
    from safetensors.torch import load_file, save_file

    f = next(path.glob("*.safetensors"))
    tensors = load_file(f)
    edit(tensors)
    save_file(tensors, str(f), metadata={"format": "pt"})


def test_coverage_passes_on_a_matching_checkpoint_for_each_rank(tiny_llama, capsys):
    assert main(["coverage", "specs/llama.yaml", str(tiny_llama), "--tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "rank 1:" in out and "model.layers.0.self_attn.qkv_proj.weight  [64, 64]" in out  # (4 + 2 + 2) * 16 / 2
    assert "coverage: ok" in out


def test_coverage_per_rank_expert_shapes_follow_ep(tmp_path, capsys):
    from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint

    make_tiny_checkpoint(tmp_path, "Qwen3MoeForCausalLM", num_hidden_layers=2, mlp_only_layers=[])
    assert main(["coverage", "specs/qwen3_moe.yaml", str(tmp_path), "--tp", "2"]) == 0
    assert "model.layers.0.mlp.experts.w13_weight  [4, 64, 64]" in capsys.readouterr().out  # 8 experts / 2 ranks
    assert main(["coverage", "specs/qwen3_moe.yaml", str(tmp_path), "--tp", "2", "--ep", "1"]) == 0
    assert "model.layers.0.mlp.experts.w13_weight  [8, 32, 64]" in capsys.readouterr().out  # each expert TP-sharded
    assert main(["coverage", "specs/qwen3_moe.yaml", str(tmp_path), "--tp", "2", "--ep", "3"]) == 2


@pytest.mark.parametrize("target", ["rocm", "neuron"])
def test_coverage_names_a_mis_shaped_tensor(tiny_llama, tmp_path, target, capsys):
    d = shutil.copytree(tiny_llama, tmp_path / "ck")
    _rewrite(d, lambda t: t.update({"model.layers.1.mlp.up_proj.weight": t["model.layers.1.mlp.up_proj.weight"][:90]}))
    assert main(["coverage", "specs/llama.yaml", str(d), "--target", target]) == 1
    out = capsys.readouterr().out
    assert "model.safetensors" in out and "model.layers.1.mlp.up_proj.weight" in out
    assert "90" in out and "96" in out  # actual and expected rows
    assert "coverage: FAILED" in out


def test_coverage_locates_unexpected_tensors_at_the_spec(tiny_llama, tmp_path, capsys):
    d = shutil.copytree(tiny_llama, tmp_path / "ck")
    _rewrite(d, lambda t: t.update({"model.layers.0.mlp.extra_scale": t["model.norm.weight"].clone()}))
    assert main(["coverage", "specs/llama.yaml", str(d)]) == 1
    out = capsys.readouterr().out
    assert "model.layers.0.mlp.extra_scale" in out
    assert "specs/llama.yaml:" in out and "checkpoint.ignore" in out


def test_run_fails_fast_with_the_coverage_report(tiny_llama, tmp_path, monkeypatch, capsys):
    from modelgen.runtime.engine import llm as llm_module

    d = shutil.copytree(tiny_llama, tmp_path / "ck")
    _rewrite(d, lambda t: t.pop("model.layers.1.self_attn.o_proj.weight"))
    monkeypatch.setattr(llm_module, "LLM", lambda *a, **k: pytest.fail("weights were loaded"))
    assert main(["run", "--checkpoint", str(d), "--prompt-ids", "5,6"]) == 1
    assert "model.layers.1.self_attn.o_proj.weight" in capsys.readouterr().err


def test_pre_commit_hook_runs_modelgen_check_on_spec_changes():
    from ruamel.yaml import YAML

    hooks = YAML(typ="safe").load((REPO_ROOT / ".pre-commit-hooks.yaml").read_text())
    hook = next(h for h in hooks if h["id"] == "modelgen-check")
    assert hook["entry"] == "modelgen check" and hook["language"] == "python" and hook["pass_filenames"] is False
    import re

    for path, runs in (("specs/llama.yaml", True), ("templates/rocm/model.py.j2", True), ("generated/rocm/x.py", True),
                       ("runtime/engine/llm.py", False)):
        assert bool(re.match(hook["files"], path)) == runs, path


# ---------------------------------------------------------------------------------------------------------- verify
def test_verify_fails_on_a_spec_that_computes_something_else(tmp_path, capsys):
    from modelgen.cli.verify import verify_spec

    spec = tmp_path / "llama.yaml"  # RoPE over (2i, 2i+1) pairs instead of HF's rotate_half halves
    spec.write_text((SPECS / "llama.yaml").read_text().replace("style: rotate_half", "style: pairwise"))
    report = verify_spec(spec, ("rocm",), bf16=False)
    # (greedy tokens may survive an error of ~1e-2 on the tiny model's small logits; the logits check does not)
    assert "fp32 logits" in {c.name for c in report.failures()} and "config" not in {c.name for c in report.failures()}
    fp32 = next(c for c in report.failures() if c.name == "fp32 logits")
    assert "first layer over 0.0001: 0" in fp32.detail  # RoPE is in every layer: layer 0 already diverges
    assert main(["verify", str(spec), "--target", "rocm", "--no-bf16"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_verify_fails_on_a_config_key_the_spec_drops(tmp_path):
    from modelgen.cli.verify import verify_spec

    spec = tmp_path / "llama.yaml"
    spec.write_text((SPECS / "llama.yaml").read_text().replace("  - pretraining_tp", "  - not_a_key"))
    # the base tiny config only (its +features config would fail the same config check a second time)
    report = verify_spec(spec, ("neuron",), bf16=False, features=False)
    failures = report.failures()
    assert [c.name for c in failures] == ["config"] and "pretraining_tp" in failures[0].detail
