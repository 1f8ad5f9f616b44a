"""The compile cache (codegen/cache.py): `check` / `build` / `list` skip specs whose inputs did not change, and never
call a stale file fresh: an edited generated file, template, base spec or compiler source is seen."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from modelgen.codegen import build as build_module
from modelgen.codegen import cache, lower
from modelgen.codegen import render as render_module
from modelgen.codegen.build import build, check
from modelgen.codegen.render import TARGETS

SPECS = Path(__file__).resolve().parent.parent / "specs"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """specs/ with llama and qwen3 (extends llama), generated/ built from them, a private cache."""
    specs = tmp_path / "specs"
    specs.mkdir()
    for name in ("llama.yaml", "qwen3.yaml"):
        shutil.copy(SPECS / name, specs / name)
    monkeypatch.setattr(build_module, "SPECS_DIR", specs)
    monkeypatch.setattr(render_module, "SPECS_DIR", specs)
    monkeypatch.setenv("MODELGEN_CACHE", str(tmp_path / "cache"))
    build(build_module.all_specs(), TARGETS, out_dir=tmp_path / "generated")
    return tmp_path


def _no_compiles(monkeypatch):
    calls = []

    def counting(path):
        calls.append(Path(path).name)
        return original(path)

    original = build_module.compile_spec
    monkeypatch.setattr(build_module, "compile_spec", counting)
    return calls


def test_nothing_changed_compiles_nothing(tree, monkeypatch):
    calls = _no_compiles(monkeypatch)
    assert check(tree / "generated") == []
    assert build(build_module.all_specs(), TARGETS, out_dir=tree / "generated") == []
    assert calls == []
    assert len(list((tree / "cache" / "compile").glob("*.json"))) == 2


def test_an_edited_generated_file_is_still_stale(tree):
    p = tree / "generated" / "vllm" / "qwen3" / "model.py"
    p.write_text(p.read_text() + "# edited\n")
    diffs = check(tree / "generated")
    assert len(diffs) == 1 and diffs[0].startswith("stale: generated/vllm/qwen3/model.py")
    assert build(build_module.all_specs(), TARGETS, out_dir=tree / "generated") == [p]
    assert check(tree / "generated") == []


def test_a_base_spec_edit_recompiles_its_children(tree, monkeypatch):
    llama = tree / "specs" / "llama.yaml"
    llama.write_text(llama.read_text().replace("description: ", "description: Edited. ", 1))
    calls = _no_compiles(monkeypatch)
    diffs = check(tree / "generated")
    assert set(calls) >= {"llama.yaml", "qwen3.yaml"}  # qwen3's own bytes did not change; its base did
    assert any("generated/rocm/qwen3/" in d for d in diffs) and any("generated/rocm/llama/" in d for d in diffs)


def test_a_template_edit_misses(tree, monkeypatch):
    templates = tree / "templates"
    shutil.copytree(lower.TEMPLATES_DIR, templates)
    monkeypatch.setattr(render_module, "TEMPLATES_DIR", templates)
    weights = templates / "vllm" / "weights.py.j2"
    weights.write_text(weights.read_text() + "\n# a new last line\n")
    diffs = check(tree / "generated")
    assert any(d.startswith("stale: generated/vllm/llama/weights.py") for d in diffs)


def test_off_switch_and_a_corrupt_entry(tree, monkeypatch):
    for entry in (tree / "cache" / "compile").glob("*.json"):
        entry.write_text("{not json")
    calls = _no_compiles(monkeypatch)
    assert check(tree / "generated") == [] and sorted(calls) == ["llama.yaml", "qwen3.yaml"]
    calls.clear()
    monkeypatch.setenv("MODELGEN_COMPILE_CACHE", "0")
    assert check(tree / "generated") == [] and sorted(calls) == ["llama.yaml", "qwen3.yaml"]
    assert cache.lookup(tree / "specs" / "llama.yaml") is None


def test_an_entry_records_hashes_not_text(tree):
    raw = [json.loads(p.read_text()) for p in (tree / "cache" / "compile").glob("*.json")]
    variant = next(v for r in raw for v in r["variants"] if v["name"] == "qwen3")
    assert variant["architectures"] == ["Qwen3ForCausalLM"] and list(variant["bases"]) == [
        str(tree / "specs" / "llama.yaml")]
    assert set(variant["files"]) == set(TARGETS)
    assert all(len(d) == 64 for f in variant["files"].values() for d in f.values())
