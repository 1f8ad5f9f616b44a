"""Decode benchmark, DeepSeek-V3 shape (1 dense + 1 MoE layer): modelgen vs transformers eager in one run; ``--quant fp8``
adds the FP8 block-scaled checkpoint in two legs, weights kept FP8 (block-scaled GEMMs) and dequantized at load, with
transformers running the dequantized weights (``--systems hf_eager`` skips the bf16 leg).

A named entry point of ``bench/arch.py`` (its docstring says what is measured and how the roofline is counted):

  python -m bench.deepseek [--layers N] [--batches 1 32] [--quant fp8 [--quant-modes keep dequantize]]
                           [--systems modelgen hf_eager] [--out bench/results/h200-deepseek_v3.json]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.arch import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(["--model", "deepseek_v3", *sys.argv[1:]]))
