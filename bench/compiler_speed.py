"""CPU seconds of the compiler's everyday commands, and of `modelgen run` up to its first token, on two checkouts.

Each command is a fresh process (``resource.getrusage(RUSAGE_CHILDREN)``: user + system CPU seconds, which a busy
machine inflates far less than wall time); the median of ``--repeats`` runs. Figures per checkout:

  * ``check``            ``modelgen check`` with nothing changed (after one warm-up run, so a cache is filled);
  * ``check_touched``    ``modelgen check`` after one spec (specs/qwen3.yaml, a comment line) was touched -- its
                         packages are then stale, so the command renders and reports them;
  * ``list``             ``modelgen list``;
  * ``build_one``        ``modelgen build specs/qwen3_next.yaml`` with nothing changed;
  * ``run_first_token``  ``modelgen run --checkpoint SmolLM2 --prompt-ids 1,2,3 --max-new-tokens 1`` (import, checks,
                         load, prefill): CPU seconds and wall seconds.

  python bench/compiler_speed.py --before /tmp/before-checkout --out bench/results/cpu-compiler-speed.json

``--before`` is a checkout of an earlier commit (``git worktree add /tmp/before-checkout <rev>``) installed in the
same environment's import path (its commands run with ``PYTHONPATH`` set to it); the current checkout is "after".
The compile cache (``$MODELGEN_CACHE/compile``) is pointed at a fresh folder per checkout.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cpu_run(cmd: list[str], cwd: Path, env: dict) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, r.returncode


def _median(cmd, cwd, env, repeats, setup=None, teardown=None) -> dict:
    cpus, walls, codes = [], [], set()
    for _ in range(repeats):
        if setup:
            setup()
        try:
            cpu, wall, rc = _cpu_run(cmd, cwd, env)
        finally:
            if teardown:
                teardown()
        cpus.append(cpu)
        walls.append(wall)
        codes.add(rc)
    return {"cpu_s": round(statistics.median(cpus), 3), "wall_s": round(statistics.median(walls), 3),
            "exit_codes": sorted(codes)}


def measure(checkout: Path, ckpt: str, repeats: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout), MODELGEN_CACHE=tempfile.mkdtemp(prefix="modelgen-bench-cache-"))
    env.pop("MODELGEN_COMPILE_CACHE", None)
    modelgen = [sys.executable, "-m", "modelgen.cli"]
    _cpu_run(modelgen + ["check"], checkout, env)  # warm-up: fills a compile cache where there is one
    out = {"check": _median(modelgen + ["check"], checkout, env, repeats)}
    spec = checkout / "specs" / "qwen3.yaml"
    original = spec.read_bytes()
    out["check_touched"] = _median(modelgen + ["check"], checkout, env, repeats,
                                   setup=lambda: spec.write_bytes(original + b"# touched\n"),
                                   teardown=lambda: spec.write_bytes(original))
    out["list"] = _median(modelgen + ["list"], checkout, env, repeats)
    out["build_one"] = _median(modelgen + ["build", "specs/qwen3_next.yaml"], checkout, env, repeats)
    run = modelgen + ["run", "--checkpoint", ckpt, "--prompt-ids", "1,2,3", "--max-new-tokens", "1", "--device", "cpu"]
    out["run_first_token"] = _median(run, checkout, env, repeats)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", type=Path, required=True, help="checkout of the earlier commit")
    p.add_argument("--out", type=Path)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    from modelgen.runtime.convert.smollm2 import ensure_smollm2_checkpoint

    ckpt = str(ensure_smollm2_checkpoint())
    rev = lambda d: subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=d, capture_output=True,  # noqa: E731
                                   text=True).stdout.strip()
    result = {"cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg()[0], "repeats": args.repeats,
              "before": {"rev": rev(args.before), **measure(args.before, ckpt, args.repeats)},
              "after": {"rev": rev(ROOT), **measure(ROOT, ckpt, args.repeats)}}
    result["speedup_cpu"] = {k: round(result["before"][k]["cpu_s"] / max(result["after"][k]["cpu_s"], 1e-9), 2)
                             for k in ("check", "check_touched", "list", "build_one", "run_first_token")}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
