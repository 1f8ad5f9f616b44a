"""`modelgen check` passes on the repo and fails with a diff after an edit; builds are byte-identical."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modelgen.codegen.build import all_specs, check, render_all
from modelgen.codegen.render import TARGETS

REPO = Path(__file__).resolve().parent.parent


def modelgen(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "modelgen.cli", *args], cwd=cwd, capture_output=True, text=True)


def test_repo_is_up_to_date():
    assert check() == []


def test_two_builds_are_byte_identical():
    assert render_all(all_specs(), TARGETS) == render_all(all_specs(), TARGETS)


@pytest.fixture()
def repo_copy(tmp_path):
    dst = tmp_path / "repo"
    for name in ("modelgen", "cli", "codegen", "runtime", "specs", "templates", "generated"):
        shutil.copytree(REPO / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def test_check_cli_passes_then_fails_on_edited_generated_file(repo_copy):
    ok = modelgen("check", cwd=repo_copy)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    model = repo_copy / "generated" / "rocm" / "llama" / "model.py"
    model.write_text(model.read_text().replace("class LlamaMLP", "class LlamaMLP2"))
    bad = modelgen("check", cwd=repo_copy)
    assert bad.returncode == 1
    assert "stale: generated/rocm/llama/model.py" in bad.stdout
    assert "-class LlamaMLP2" in bad.stdout and "+class LlamaMLP" in bad.stdout


def test_check_cli_fails_on_edited_spec_and_on_missing_and_extra_files(repo_copy):
    spec = repo_copy / "specs" / "llama.yaml"
    spec.write_text(spec.read_text().replace("default: 2048", "default: 4096"))
    (repo_copy / "generated" / "neuron" / "llama" / "factory.py").unlink()
    (repo_copy / "generated" / "rocm" / "llama" / "extra.py").write_text("x = 1\n")
    bad = modelgen("check", cwd=repo_copy)
    assert bad.returncode == 1
    assert "+            max_position_embeddings = 4096" in bad.stdout
    assert "missing: generated/neuron/llama/factory.py" in bad.stdout
    assert "extra (no spec generates it): generated/rocm/llama/extra.py" in bad.stdout
    # and a rebuild repairs it
    assert modelgen("build", "--all", cwd=repo_copy).returncode == 0
    (repo_copy / "generated" / "rocm" / "llama" / "extra.py").unlink()
    assert modelgen("check", cwd=repo_copy).returncode == 0


def test_build_single_target_writes_only_that_target(repo_copy):
    shutil.rmtree(repo_copy / "generated")
    r = modelgen("build", "specs/llama.yaml", "--target", "neuron", cwd=repo_copy)
    assert r.returncode == 0, r.stderr
    assert (repo_copy / "generated" / "neuron" / "llama" / "factory.py").exists()
    assert not (repo_copy / "generated" / "rocm" / "llama").exists()


def test_cli_spec_error_exit_code_and_message(repo_copy):
    spec = repo_copy / "specs" / "llama.yaml"
    spec.write_text(spec.read_text().replace("kind: gqa", "kind: gqb"))
    r = modelgen("build", "--all", cwd=repo_copy)
    assert r.returncode == 1
    assert "specs/llama.yaml:" in r.stderr and "blocks.decoder.attention.kind: got 'gqb'" in r.stderr
