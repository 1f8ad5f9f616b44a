"""What the compiler reads besides spec text (issue 27 items 4 and 9): spec paths that are not regular files, and the
``config.json`` that ``modelgen new --from-hf`` drafts from. Each case is one line, never a traceback or a hang;
the hang-prone ones (a FIFO blocks its reader forever) run in a subprocess with a timeout."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from modelgen.cli import draft as draft_module
from modelgen.cli.draft import DraftError, draft_spec
from modelgen.codegen.errors import SpecError
from modelgen.codegen.lower import compile_spec

REPO = Path(__file__).resolve().parent.parent
LLAMA = REPO / "specs" / "llama.yaml"
LOCATED = re.compile(r"^[^\n]+:\d+:\d+: [^\n]+$")

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")


def _cli(args: list[str], tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "MODELGEN_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    script = ("import sys; from pathlib import Path; import modelgen.codegen.build as b; "
              f"out = Path({str(tmp_path / 'out')!r}); b.build.__defaults__ = (out, False); "
              "from modelgen.cli import main; sys.exit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


# ------------------------------------------------------------------------------------ spec paths: regular files only
def _special(tmp_path: Path, kind: str) -> Path:
    if kind == "fifo":
        p = tmp_path / "spec.yaml"
        os.mkfifo(p)
        return p
    if kind == "directory":
        p = tmp_path / "dir.yaml"
        p.mkdir()
        return p
    return Path("/dev/zero" if kind == "device" else "/dev/null")


@pytest.mark.parametrize("kind, fragment", [("fifo", "a FIFO"), ("directory", "a directory"),
                                            ("device", "a character device"), ("null", "a character device")])
def test_spec_that_is_not_a_regular_file_is_refused_without_reading(tmp_path, kind, fragment):
    p = _special(tmp_path, kind)
    start = time.perf_counter()
    with pytest.raises(SpecError) as e:
        compile_spec(p)
    assert time.perf_counter() - start < 5
    assert LOCATED.match(str(e.value)) and f"cannot read spec: {fragment}, not a regular file" in str(e.value)


def test_build_command_on_a_fifo_spec_and_a_fifo_base(tmp_path):
    fifo = _special(tmp_path, "fifo")
    r = _cli(["build", str(fifo)], tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == [f"{fifo}:1:1: cannot read spec: a FIFO, not a regular file"], r.stderr
    # A base spec named by `extends:` goes through the same reader.
    child = tmp_path / "child" / "child.yaml"
    child.parent.mkdir()
    os.mkfifo(child.parent / "base.yaml")
    child.write_text("extends: base.yaml\nname: child\n")
    start = time.perf_counter()
    with pytest.raises(SpecError) as e:
        compile_spec(child)
    assert time.perf_counter() - start < 5 and "extends" in str(e.value), str(e.value)


# ------------------------------------------------------------------------------------------- new --from-hf inputs
def _config_file(tmp_path: Path, cfg: dict | str) -> Path:
    p = tmp_path / "config.json"
    p.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return p


def _tiny_llama_config() -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 64, "hidden_size": 16,
            "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
            "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "hidden_act": "silu"}


@pytest.mark.parametrize("field, value, fragment", [
    ("architectures", 5, "architectures: expected a list of strings, got 5"),
    ("architectures", [{"a": 1}], "architectures: expected a list of strings"),
    ("model_type", {"x": 1}, "model_type: expected a string"),
])
def test_draft_refuses_non_strings_in_one_line(tmp_path, field, value, fragment):
    cfg = {**_tiny_llama_config(), field: value}
    with pytest.raises(DraftError) as e:
        draft_spec(_config_file(tmp_path, cfg), specs=[LLAMA])
    assert fragment in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("text, fragment", [
    ("[" * 100_000 + "]" * 100_000, "nests deeper than"),  # runtime/loader/files.py's bounded JSON reader
    ("{\"a\": 1", "not valid JSON"),
    (b"\xff\xfe", "is not UTF-8 text"),
])
def test_draft_refuses_bad_json_in_one_line(tmp_path, text, fragment):
    p = tmp_path / "config.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(DraftError) as e:
        draft_spec(p, specs=[LLAMA])
    assert fragment in str(e.value) and "\n" not in str(e.value) and len(str(e.value)) < 500, str(e.value)


def test_draft_refuses_a_fifo_config(tmp_path):
    os.mkfifo(tmp_path / "config.json")
    start = time.perf_counter()
    with pytest.raises(DraftError, match="is a FIFO .*not a regular file"):
        draft_spec(tmp_path / "config.json", specs=[LLAMA])
    assert time.perf_counter() - start < 5


def test_draft_with_odd_values_is_a_todo_not_a_traceback(tmp_path):
    cfg = {**_tiny_llama_config(), "hidden_size": 1e300, "torch_dtype": {"a": 1}, "rope_scaling": 5}
    d = draft_spec(_config_file(tmp_path, cfg), specs=[LLAMA])
    assert "# TODO requires: llama.yaml refuses this config:" in d.text, d.text


HOSTILE_KEYS = [
    "x\nlayers: {count: 1}\n#",
    "y: 1 # z",
    "!!python/object/apply:os.system ['echo pwned']",
    "q'\"\\\u2028name: evil\u0085k: v\r\nl: m",
    "#\n- a\n",
]


def test_hostile_config_cannot_add_a_spec_key(tmp_path):
    cfg = {**_tiny_llama_config(), **{k: f"v\n{k}" for k in HOSTILE_KEYS}}
    cfg["architectures"] = ["LlamaForCausalLM", "X]\nlayers: {count: 1}\n#"]
    cfg["model_type"] = "llama\nlayers: {count: 1}\n!!python/name:os.system ' \""
    d = draft_spec(_config_file(tmp_path, cfg), specs=[LLAMA])
    parsed = YAML(typ="safe", pure=True).load(d.text)
    assert set(parsed) == {"extends", "name", "class_prefix", "description", "hf"}, d.text
    assert set(parsed["hf"]) == {"architectures", "model_type", "modeling"}
    assert parsed["hf"]["architectures"] == cfg["architectures"]  # the strings themselves, quoted
    assert parsed["hf"]["model_type"] == cfg["model_type"]
    todos = [line for line in d.text.splitlines() if line.startswith("# TODO config: ")]
    assert len(todos) == len(HOSTILE_KEYS), d.text  # each key is one comment line, escaped
    for line in d.text.splitlines():
        assert not line.startswith(("layers:", "name: evil", "k: v", "l: m", "- a")), line


def test_hostile_keys_draft_still_builds_as_the_base(tmp_path):
    cfg = {**_tiny_llama_config(), **{k: 1 for k in HOSTILE_KEYS}}
    d = draft_spec(_config_file(tmp_path, cfg), specs=[LLAMA])
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(LLAMA, specs / "llama.yaml")
    (specs / "zz_draft.yaml").write_text(d.text)
    ir = compile_spec(specs / "zz_draft.yaml")
    assert ir.num_layers.py == compile_spec(LLAMA).num_layers.py  # no injected `layers: {count: 1}`


def test_parse_back_guard_is_live(tmp_path, monkeypatch):
    # Were a comment written raw (the old string formatting), the guard refuses the draft instead of returning it.
    monkeypatch.setattr(draft_module, "_comment", lambda text: "# " + text)
    cfg = {**_tiny_llama_config(), "x\nlayers: {count: 1}\n#": 1}
    with pytest.raises(DraftError, match="does not read back"):
        draft_spec(_config_file(tmp_path, cfg), specs=[LLAMA])


# ------------------------------------------------------------------------------------ modelgen coverage's config
@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    from modelgen.runtime.testing.tiny_models import make_tiny_checkpoint

    ck = tmp_path_factory.mktemp("ck") / "ck"
    make_tiny_checkpoint(ck, "LlamaForCausalLM", num_hidden_layers=2)
    return ck


def _with_config(tiny_llama: Path, tmp_path: Path, **changes) -> Path:
    ck = tmp_path / "ck"
    shutil.copytree(tiny_llama, ck)
    cfg = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**cfg, **changes}))
    return ck


def test_coverage_refuses_a_dict_dtype_in_one_line(tiny_llama, tmp_path):
    import importlib

    from modelgen.cli.coverage import checkpoint_coverage
    from modelgen.codegen.errors import ModelgenError

    from modelgen.runtime.hf_config import ConfigError

    ck = _with_config(tiny_llama, tmp_path, torch_dtype={"a": 1})
    # The checkpoint's own config check (runtime/hf_config.py) refuses it before coverage reads a dtype; the CLI
    # prints either error as its one line.
    with pytest.raises((ModelgenError, ConfigError)) as e:
        checkpoint_coverage(importlib.import_module("modelgen.generated.rocm.llama"), ck)
    assert "torch_dtype" in str(e.value) and "expected a" in str(e.value) and "\n" not in str(e.value)


def test_coverage_reports_an_unbuildable_size_instead_of_raising(tiny_llama, tmp_path):
    import importlib

    from modelgen.cli.coverage import checkpoint_coverage

    ck = _with_config(tiny_llama, tmp_path, hidden_size=1e300)
    start = time.perf_counter()
    try:
        report = checkpoint_coverage(importlib.import_module("modelgen.generated.rocm.llama"), ck)
    except Exception as e:  # noqa: BLE001 - refused as a config error is fine too, if it is one line
        assert type(e).__name__ in ("ConfigError", "CoverageConfigError") and "\n" not in str(e), repr(e)
    else:
        errors = [r.error for r in report.ranks if r.error]
        assert errors and all("\n" not in err for err in errors), errors
    assert time.perf_counter() - start < 30
