"""Getting a model in (issue 28, item 5): ``org/name`` checkpoints through huggingface_hub's cache (a fake cache laid
out in a temp dir; never the network), the one-line offline error, ``--device auto``, CPU intra-op threads,
labelled multi-prompt output, ``--version``, help texts that match the code, and the README lines that say so."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from modelgen.cli import build_parser, main
from modelgen.runtime import host, hub
from modelgen.runtime.loader.checkpoint import CheckpointError
from tests.test_python_api import make_api_checkpoint

REPO = Path(__file__).resolve().parent.parent
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def ckpt(llama_checkpoint, tmp_path_factory):
    return make_api_checkpoint(llama_checkpoint, tmp_path_factory)  # tiny Llama + a word tokenizer


def _lay_out_cache(cache: Path, repo_id: str, src: Path | None, files: list[str] | None = None) -> Path:
    """huggingface_hub's cache layout: models--org--name/{blobs/<sha>, snapshots/<commit>/<file> -> ../../blobs/<sha>,
    refs/main}; returns the snapshot directory."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    names = files if files is not None else sorted(p.name for p in src.iterdir())
    for i, name in enumerate(names):
        blob = repo / "blobs" / f"{i:040x}"
        blob.write_bytes((src / name).read_bytes())
        (snap / name).symlink_to(Path("..", "..", "blobs", blob.name))
    return snap


@pytest.fixture
def hf_env(tmp_path, monkeypatch):
    """An empty hub cache under tmp_path, offline: nothing here may reach the network."""
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["run", "--device", "cpu", *args])  # pinned: `auto` would pick a GPU where there is one
    return rc, out.getvalue(), err.getvalue()


# --- hub ids ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, want", [
    ("HuggingFaceTB/SmolLM2-135M-Instruct", True), ("org/name", True), ("meta-llama/Llama-3.1-8B", True),
    ("org/name.v2", True), ("./org/name", False), ("/abs/name", False), ("~/org/name", False), ("a/b/c", False),
    ("name", False), ("org--x/name", False), ("org/../name", False), ("org/", False), ("/name", False),
    (Path("org/name"), False), ("org/na me", False),
])
def test_hub_id_shape(value, want):
    assert hub.looks_like_hub_id(value) is want


def test_hub_id_from_the_cache(ckpt, hf_env):
    """A cached snapshot is found offline; CheckpointDir (LLM, serve, coverage) and `run` take the id."""
    from modelgen.runtime.checkpoint_dir import CheckpointDir

    snap = _lay_out_cache(hf_env, "tiny-org/tiny-llama", ckpt)
    assert CheckpointDir("tiny-org/tiny-llama").path == snap
    common = ("--prompt", "hello world", "--max-new-tokens", "4", "--ignore-eos", "--json")
    rc, out, err = _run("--checkpoint", "tiny-org/tiny-llama", *common)
    assert rc == 0, err
    rc, local, err2 = _run("--checkpoint", str(ckpt), *common)
    assert rc == 0, err2
    assert json.loads(out)["outputs"] == json.loads(local)["outputs"]
    assert "downloading" not in err  # a cache hit: no download announced


def test_local_directory_wins_over_the_hub(ckpt, hf_env, tmp_path, monkeypatch):
    """A folder that exists is used as is, even when its name is shaped like a hub id (the cache is empty)."""
    (tmp_path / "work" / "org").mkdir(parents=True)
    (tmp_path / "work" / "org" / "name").symlink_to(ckpt, target_is_directory=True)
    monkeypatch.chdir(tmp_path / "work")
    assert hub.resolve_checkpoint("org/name") == Path("org/name")


def test_offline_with_nothing_cached_is_one_line(hf_env):
    """Through the real entry point: exit 1, one line naming the id, HF_HUB_OFFLINE and the download command."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-m", "modelgen.cli", "run", "--checkpoint", "no-org/no-model",
                           "--prompt", "hi"], capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = lines[0]
    for needle in ("no-org/no-model", "no such checkpoint directory", str(hf_env), "HF_HUB_OFFLINE",
                   "download no-org/no-model --local-dir DIR"):
        assert needle in line, line


def test_cached_without_weights_offline(ckpt, hf_env):
    _lay_out_cache(hf_env, "tiny-org/config-only", ckpt, files=["config.json"])
    with pytest.raises(CheckpointError, match=r"tiny-org/config-only: .*without its config.json / \*.safetensors.*"
                       r"HF_HUB_OFFLINE.*download tiny-org/config-only --local-dir DIR"):
        hub.resolve_hub_id("tiny-org/config-only")


def test_download_when_online_and_not_cached(ckpt, hf_env, monkeypatch):
    """Online and not cached: one snapshot_download of the files modelgen reads, announced; (fake hub, no network)."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    calls = []

    def fake_snapshot_download(repo_id, *, cache_dir=None, local_files_only=False, allow_patterns=None, **kw):
        calls.append((repo_id, cache_dir, local_files_only, allow_patterns))
        if local_files_only:
            raise LocalEntryNotFoundError("not cached")
        return str(_lay_out_cache(Path(cache_dir), repo_id, ckpt))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    told = []
    path = hub.resolve_hub_id("tiny-org/fresh", notify=told.append)
    assert (path / "config.json").is_file() and path.is_relative_to(hf_env)
    assert [c[2] for c in calls] == [True, False]  # the cache first, then the download
    assert all(c[1] == str(hf_env) for c in calls)
    assert "*.safetensors" in calls[1][3] and not any("bin" in p for p in calls[1][3])
    assert len(told) == 1 and "downloading tiny-org/fresh" in told[0]


def test_unreachable_and_unknown_repos_are_one_line(hf_env, monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    online_error = {}

    def fake(repo_id, *, local_files_only=False, **kw):
        if local_files_only:
            raise LocalEntryNotFoundError("not cached")
        raise online_error["e"]

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    online_error["e"] = LocalEntryNotFoundError("Cannot reach the Hub: connection refused\nmore detail")
    with pytest.raises(CheckpointError) as e:
        hub.resolve_hub_id("org/unreachable")
    assert "\n" not in str(e.value) and "cannot be reached" in str(e.value)
    assert "download org/unreachable --local-dir DIR" in str(e.value)
    not_found = RepositoryNotFoundError.__new__(RepositoryNotFoundError)  # its __init__ wants an HTTP response
    Exception.__init__(not_found, "404 Client Error\nRepository Not Found")
    online_error["e"] = not_found
    with pytest.raises(CheckpointError, match=r"^org/typo: no such checkpoint directory, nor a model repository"):
        hub.resolve_hub_id("org/typo")


# --- device and threads -------------------------------------------------------------------------------------------


def test_device_auto_is_the_run_default(monkeypatch):
    assert build_parser().parse_args(["run"]).device == "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert host.resolve_device("auto") == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert host.resolve_device("auto") == "cpu" and host.resolve_device(None) == "cpu"
    assert host.resolve_device("cuda:1") == "cuda:1"  # an explicit device is the engine's to validate


def test_thread_count_sources(monkeypatch):
    monkeypatch.delenv("MODELGEN_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(host, "_cgroup_cpu_limit", lambda: None)
    load = {"1m": 0.0}
    monkeypatch.setattr(os, "getloadavg", lambda: (load["1m"], 0.0, 0.0), raising=False)
    assert host.cpu_threads() == (3, "3 usable core(s)")
    assert host.cpu_threads(ranks=2)[0] == 1
    load["1m"] = 4.0  # half the machine's 8 CPUs busy: about half of these 3 cores
    assert host.cpu_threads() == (2, "3 usable core(s), 1.5 busy")
    load["1m"] = 16.0  # overloaded: one thread, never none
    assert host.cpu_threads()[0] == 1
    load["1m"] = 0.0
    monkeypatch.setattr(host, "_cgroup_cpu_limit", lambda: 2)  # a container's CPU quota caps the affinity
    assert host.cpu_threads()[0] == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert host.cpu_threads() == (None, "OMP_NUM_THREADS")  # torch already honours it: left alone
    monkeypatch.setenv("MODELGEN_NUM_THREADS", "1")
    assert host.cpu_threads() == (1, "MODELGEN_NUM_THREADS")
    monkeypatch.setenv("MODELGEN_NUM_THREADS", "zero")
    with pytest.raises(ValueError, match="MODELGEN_NUM_THREADS='zero': expected a positive integer"):
        host.cpu_threads()


def test_run_sets_threads_and_restores_them(ckpt, monkeypatch):
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    monkeypatch.setenv("MODELGEN_NUM_THREADS", str(want))
    seen = []
    real_generate = __import__("modelgen.runtime.engine.llm", fromlist=["LLM"]).LLM.generate_ids  # --no-stream's call

    def spy(self, *a, **kw):
        seen.append(torch.get_num_threads())
        return real_generate(self, *a, **kw)

    monkeypatch.setattr("modelgen.runtime.engine.llm.LLM.generate_ids", spy)
    rc, _, err = _run("--checkpoint", str(ckpt), "--prompt-ids", "5,6", "--max-new-tokens", "2", "--no-stream",
                      "--verbose")
    assert rc == 0, err
    assert seen == [want]
    assert f"threads: {want} (MODELGEN_NUM_THREADS)" in err and f"cpu, {want} thread(s)]" in err
    assert torch.get_num_threads() == before  # an in-process caller keeps its own setting


# --- output and help ----------------------------------------------------------------------------------------------


def test_several_prompts_are_labelled(ckpt):
    common = ("--checkpoint", str(ckpt), "--prompt", "hello world", "--prompt", "world", "--prompt-ids", "5,6,7",
              "--max-new-tokens", "3", "--ignore-eos")
    rc, out, err = _run(*common)
    assert rc == 0, err
    rc, js, err = _run(*common, "--json")
    texts = [o["text"] for o in json.loads(js)["outputs"]]
    want = (f"[prompt 1] hello world\n{texts[0]}\n\n[prompt 2] world\n{texts[1]}\n\n"
            f"[prompt 3] 5,6,7\n{texts[2]}\n")
    assert out == want
    rc, one, _ = _run("--checkpoint", str(ckpt), "--prompt", "hello", "--max-new-tokens", "2", "--no-stream")
    assert rc == 0 and "[prompt" not in one  # one prompt: the answer alone


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"modelgen {version('modelgen')}"


def _help(*argv: str, capsys) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_help_texts_match_the_code(capsys):
    build = _help("build", capsys=capsys)
    assert "Nothing is written unless every spec builds" not in build  # the code keeps going (cmd_build)
    assert "the other specs are still written" in build
    run = _help("run", capsys=capsys)
    assert "--device auto|cpu|cuda[:N]" in run and "(default: auto)" in run
    assert "Hugging Face Hub id" in run and "MODELGEN_NUM_THREADS" in run


def test_readme_says_how_to_get_a_model_in():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Architectures")[0]
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in quick  # CPU wheel
    assert re.search(r"GPU \(CUDA\): `pip install torch==2\.13\.0`", quick.replace("\n", " "))  # and the GPU one
    assert "| `MODELGEN_NUM_THREADS` |" in text
    commands = text.split("## Commands")[1].split("## ")[0]
    assert "modelgen --version" in commands and "--device auto|cpu|cuda" in commands
    assert "--checkpoint DIR|ORG/NAME" in commands
