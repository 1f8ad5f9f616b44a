"""Decode benchmark, gpt-oss-20b shape (4 of 24 layers): modelgen vs transformers eager in one run; ``--quant mxfp4``
adds the MXFP4 checkpoint in two legs, experts kept MXFP4 (MoE kernels dequantizing in registers) and dequantized at
load, with transformers running the dequantized weights (``--systems hf_eager`` skips the bf16 leg).

A named entry point of ``bench/arch.py`` (its docstring says what is measured and how the roofline is counted):

  python -m bench.gpt_oss [--layers N] [--batches 1 32] [--quant mxfp4 [--quant-modes keep dequantize]]
                          [--systems modelgen hf_eager] [--out bench/results/h200-gpt_oss.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.arch import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(["--model", "gpt_oss", *sys.argv[1:]]))
