"""CPU checks of tests/gpu_helpers.py's pieces that the GPU tests rely on but that need no GPU."""
from __future__ import annotations

import os

from tests.gpu_helpers import subprocess_env


def test_subprocess_env_keeps_the_callers_pythonpath(monkeypatch):
    """The child gets the repo first and every entry of the caller's path after it (issue 29 item 5: the device's
    carried wheels live on that path; replacing it failed test_modelgen_run_device_cuda there)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/tmp/site", "", "/opt/wheels"]))
    monkeypatch.setenv("MODELGEN_SUBPROCESS_ENV_PROBE", "kept")
    env = subprocess_env("/repo")
    assert env["PYTHONPATH"].split(os.pathsep) == ["/repo", "/tmp/site", "/opt/wheels"]
    assert env["MODELGEN_SUBPROCESS_ENV_PROBE"] == "kept"  # the rest of the environment travels too
    assert os.environ["PYTHONPATH"] == os.pathsep.join(["/tmp/site", "", "/opt/wheels"])  # the caller's is untouched


def test_subprocess_env_without_a_caller_path_has_no_empty_entry(monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert subprocess_env("/repo")["PYTHONPATH"] == "/repo"
