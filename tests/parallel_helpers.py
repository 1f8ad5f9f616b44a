"""Helpers of the engine-started parallel-mode tests (pipeline, attention data parallelism)."""
from __future__ import annotations

import json
import subprocess
import sys

import torch.distributed as dist


def record_receives(monkeypatch) -> list:
    """(dtype, shape) of every tensor this process (rank 0) receives point-to-point from now on."""
    received, recv = [], dist.recv

    def recording(tensor, *args, **kwargs):
        received.append((tensor.dtype, tuple(tensor.shape)))
        return recv(tensor, *args, **kwargs)

    monkeypatch.setattr(dist, "recv", recording)
    return received


def cli_outputs(checkpoint, prompts: list[list[int]], *runs: list[str]) -> list:
    """``modelgen run --json`` greedy outputs of ``prompts`` once per extra-flag list in ``runs``; each run must
    print exactly one line (rank 0's)."""
    base = [sys.executable, "-m", "modelgen.cli", "run", "--checkpoint", str(checkpoint), "--max-new-tokens",
            "6", "--ignore-eos", "--dtype", "float32", "--json"]
    for prompt in prompts:
        base += ["--prompt-ids", ",".join(map(str, prompt))]
    outs = []
    for extra in runs:
        proc = subprocess.run(base + extra, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.strip().splitlines()
        assert len(lines) == 1, proc.stdout
        outs.append(json.loads(lines[0])["outputs"])
    return outs
