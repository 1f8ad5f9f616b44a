"""One broken spec in specs/ never changes another spec's output or index entry (issue 26 item 4): building a new
spec beside a broken one writes and indexes the new one, keeps the broken one's old entry (its package is left as
it was), and names the broken spec once."""
from __future__ import annotations

import functools
import re
import shutil
from pathlib import Path

import pytest

from modelgen.cli import main
from modelgen.codegen import build as build_module
from modelgen.codegen import render as render_module
from modelgen.codegen.build import BrokenSpecs, build
from modelgen.codegen.lower import REPO_ROOT


@pytest.fixture()
def tree(tmp_path, monkeypatch) -> Path:
    """specs/ with llama and qwen3 built into generated/, then qwen3 broken and a new llama_two beside them."""
    specs = tmp_path / "specs"
    specs.mkdir()
    for name in ("llama.yaml", "qwen3.yaml"):
        shutil.copy(REPO_ROOT / "specs" / name, specs / name)
    monkeypatch.setattr(build_module, "SPECS_DIR", specs)
    monkeypatch.setattr(render_module, "SPECS_DIR", specs)
    build(build_module.all_specs(), ("rocm",), out_dir=tmp_path / "generated")
    # `modelgen build` writes into this tree's generated/, never the repository's
    monkeypatch.setattr(build_module, "build", functools.partial(build, out_dir=tmp_path / "generated"))
    qwen3 = specs / "qwen3.yaml"
    qwen3.write_text(qwen3.read_text() + "bogus_field: 1\n")
    (specs / "llama_two.yaml").write_text(
        "extends: llama.yaml\nname: llama_two\nclass_prefix: LlamaTwo\ndescription: \"a second llama\"\n"
        "hf: {architectures: [LlamaTwoForCausalLM], model_type: llama_two, modeling: x.py}\n")
    return tmp_path


def _index(tree: Path) -> str:
    return (tree / "generated" / "rocm" / "__init__.py").read_text()


def test_a_new_spec_beside_a_broken_one_is_written_and_indexed(tree):
    before = _index(tree)
    assert '"Qwen3ForCausalLM": "qwen3"' in before and "LlamaTwo" not in before
    with pytest.raises(BrokenSpecs) as e:
        build([tree / "specs" / "llama_two.yaml"], ("rocm",), out_dir=tree / "generated", keep_going=True)
    assert [p.name for p in e.value.broken] == ["qwen3.yaml"]
    assert (tree / "generated" / "rocm" / "llama_two" / "model.py").is_file()
    index = _index(tree)
    assert '"LlamaTwoForCausalLM": "llama_two"' in index
    assert '"Qwen3ForCausalLM": "qwen3"' in index and '"LlamaForCausalLM": "llama"' in index  # kept / untouched


def test_the_broken_spec_is_named_once_even_when_given_by_a_relative_path(tree, monkeypatch, capsys):
    monkeypatch.chdir(tree)
    assert main(["build", "specs/qwen3.yaml", "specs/llama_two.yaml", "--target", "rocm"]) == 1
    err = capsys.readouterr().err
    assert err.count("unknown key 'bogus_field'") == 1, err
    assert re.search(r"1 spec\(s\) do not build and were not written: \S*specs/qwen3.yaml \(", err), err


def test_building_a_good_spec_says_which_other_spec_is_broken(tree, monkeypatch, capsys):
    monkeypatch.chdir(tree)
    assert main(["build", "specs/llama_two.yaml", "--target", "rocm"]) == 1
    err = capsys.readouterr().err
    assert err.count("unknown key 'bogus_field'") == 1, err
    assert re.search(r"do not build and were not written: \S*specs/qwen3.yaml \(", err), err


def _unknown_arch_checkpoint(path: Path) -> Path:
    import json

    from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint

    make_tiny_checkpoint(path, "LlamaForCausalLM", num_hidden_layers=1)
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["LlamaTwoForCausalLM"]
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_run_of_a_model_missing_from_the_index_names_the_broken_specs(tree, capsys):
    ck = _unknown_arch_checkpoint(tree / "ck")
    assert main(["run", "--checkpoint", str(ck), "--prompt-ids", "5,6"]) == 1
    err = capsys.readouterr().err
    assert "no generated rocm model for architectures ['LlamaTwoForCausalLM']" in err
    assert re.search(r"these specs do not build \(fix them, then `modelgen build --all`\): \S*specs/qwen3.yaml$",
                     err.strip()), err
    (tree / "specs" / "qwen3.yaml").unlink()
    assert main(["run", "--checkpoint", str(ck), "--prompt-ids", "5,6"]) == 1
    assert "every spec in specs/ builds: if the model's spec is there, run `modelgen build --all`" in \
        capsys.readouterr().err
