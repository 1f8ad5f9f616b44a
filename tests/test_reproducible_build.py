"""Builds are byte-reproducible across processes, and `modelgen check` compares bytes (any file, any byte)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from modelgen.codegen.build import all_specs, build, check, render_all
from modelgen.codegen.render import TARGETS

REPO = Path(__file__).resolve().parent.parent

BUILD = """\
import sys
from pathlib import Path
from modelgen.codegen.build import all_specs, build
from modelgen.codegen.render import TARGETS
build(all_specs(), TARGETS, out_dir=Path(sys.argv[1]))
"""


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_builds_in_processes_with_different_hash_seeds_are_byte_identical(tmp_path, rendered):
    outs = []
    for seed in ("0", "4242"):  # str/frozenset iteration order differs between these two processes
        out = tmp_path / f"seed{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        r = subprocess.run([sys.executable, "-c", BUILD, str(out)], cwd=REPO, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        outs.append(tree_bytes(out))
    a, b = outs
    assert sorted(a) == sorted(b)
    differing = [rel for rel in a if a[rel] != b[rel]]
    assert not differing, f"differ between PYTHONHASHSEED=0 and 4242: {differing}"
    # ... and both equal this process's in-memory render (a third hash seed)
    assert a == {rel: text.encode("utf-8") for rel, text in rendered.items()}


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return render_all(all_specs(), TARGETS)


@pytest.fixture(scope="module")
def built(tmp_path_factory, rendered) -> Path:
    out = tmp_path_factory.mktemp("generated")
    build(all_specs(), TARGETS, out_dir=out)
    return out


@pytest.fixture()
def fresh(built, rendered, tmp_path, monkeypatch) -> Path:
    """A copy of a clean build; `check`/`build` render from a cache (the render itself is tested above)."""
    import shutil

    from modelgen.codegen import build as build_module

    monkeypatch.setattr(build_module, "render_all", lambda specs, targets: dict(rendered))
    out = tmp_path / "generated"
    shutil.copytree(built, out)
    assert check(out) == []
    return out


def one(diffs: list[str]) -> str:
    assert len(diffs) == 1, diffs
    return diffs[0]


def test_check_reports_crlf_line_endings(fresh):
    p = fresh / "rocm" / "llama" / "model.py"
    p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    head = one(check(fresh)).splitlines()[0]
    assert head == "stale: generated/rocm/llama/model.py (bytes differ: CRLF/CR line endings)"


def test_check_reports_trailing_bytes_and_missing_final_newline(fresh):
    p = fresh / "neuron" / "qwen3" / "config.py"
    original = p.read_bytes()
    p.write_bytes(original + b"\x00")
    assert one(check(fresh)).startswith("stale: generated/neuron/qwen3/config.py")
    p.write_bytes(original.rstrip(b"\n"))
    assert "final newline" in one(check(fresh)).splitlines()[0]
    p.write_bytes(original + b"\xff")
    assert "not valid UTF-8" in one(check(fresh)).splitlines()[0]


@pytest.mark.parametrize("name", ["notes.txt", "rocm/llama/kernel.so", ".model.py.abc.tmp", "neuron/x/y/data.json"])
def test_check_reports_extra_files_of_any_kind(fresh, name):
    p = fresh / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"\x7fELF")
    assert one(check(fresh)).startswith(f"extra (no spec generates it): generated/{name}")


def test_check_ignores_pycache_and_reports_links(fresh):
    cache = fresh / "rocm" / "llama" / "__pycache__"
    cache.mkdir()
    (cache / "model.cpython-311.pyc").write_bytes(b"\x00")
    assert check(fresh) == []
    (fresh / "rocm" / "llama" / "link.py").symlink_to(fresh / "rocm" / "llama" / "model.py")
    assert one(check(fresh)).startswith("not a regular file (a link, a device, ...): generated/rocm/llama/link.py")


def test_build_rewrites_a_crlf_file(fresh):
    p = fresh / "rocm" / "llama" / "weights.py"
    p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    written = build(all_specs(), TARGETS, out_dir=fresh)
    assert written == [p]
    assert check(fresh) == []
