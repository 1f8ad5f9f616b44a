"""Decode benchmark, Qwen3-Next-80B-A3B shape (8 of 48 layers, 3:1 linear:full): modelgen vs transformers eager in one run.

A named entry point of ``bench/arch.py`` (its docstring says what is measured and how the roofline is counted):

  python -m bench.qwen3_next [--layers N] [--batches 1 32] [--out bench/results/h200-qwen3_next.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.arch import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(["--model", "qwen3_next", *sys.argv[1:]]))
