"""Decode benchmark, gpt-oss-20b shape (4 of 24 layers; --quant mxfp4): modelgen vs transformers eager in one run.

A named entry point of ``bench/arch.py`` (its docstring says what is measured and how the roofline is counted):

  python -m bench.gpt_oss [--layers N] [--batches 1 32] [--out bench/results/h200-gpt_oss.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.arch import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(["--model", "gpt_oss", *sys.argv[1:]]))
