"""FP8 block-scaled GEMM vs dequantize-at-load, at DeepSeek-V3's linear shapes (issue 8 item 6/7: "measure it").

For each weight shape and row count M: the Triton FP8 kernel (``runtime/ops/gpu/fp8.py``: FP8 weight + 128x128
scales, widened in registers) against the bf16 weight the loader makes today (dequantized at load) through modelgen's
GPU ``linear`` (the timed skinny-GEMM choice) and ``torch.matmul``. Each timing is the median replay of a CUDA graph
that runs the GEMM over ``--copies`` weight copies in turn (more bytes than the 60 MB L2, so every read comes from
HBM), divided by the copies. Reports microseconds, weight bytes / time against the measured copy rate, and the FP8
speed-up; JSON to ``--out``. ``--sweep-rows M...``: also times every (BN, split-K, warps, stages) candidate at those
row counts and records the fastest against the table's choice (``runtime/ops/gpu/fp8.py`` ``table_config``).

  python -m bench.fp8_gemm --out bench/results/h200-fp8-gemm.json [--sweep-rows 1 32]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.arch import quantize_fp8_gpu  # noqa: E402
from bench.common import log  # noqa: E402
from bench.decode import measure_ceilings  # noqa: E402
from bench.moe import graph_ms  # noqa: E402

# (name, N, K): DeepSeek-V3 linear weights [out, in] (per expert for the MoE ones)
SHAPES = [("q_a_proj", 1536, 7168), ("q_b_proj", 24576, 1536), ("kv_a_proj_with_mqa", 576, 7168),
          ("kv_b_proj", 32768, 512), ("o_proj", 7168, 16384), ("dense gate_up", 2 * 18432, 7168),
          ("dense down", 7168, 18432), ("expert gate_up", 2 * 2048, 7168), ("expert down", 7168, 2048)]


def sweep(x: torch.Tensor, qs: list, copies: int) -> dict:
    """Every (BN, split-K, warps, stages) candidate at this shape: microseconds each, and the fastest."""
    from modelgen.runtime.ops.gpu.fp8 import block_fp8_linear, table_config

    M, K = x.shape
    N = qs[0][0].shape[0]
    BM = 16 if M <= 16 else (32 if M <= 32 else 64)
    times = {}
    for BN in (32, 64, 128):
        for split in (1, 2, 4, 8, 16):
            if split > -(-K // 128):
                continue
            for warps, stages in ((4, 3), (4, 4)):
                cfg = (BM, BN, split, warps, stages)
                try:
                    times[str(cfg)] = graph_ms(lambda: [block_fp8_linear(x, q, s, config=cfg) for q, s in qs]) \
                        / copies * 1e3
                except Exception as e:  # e.g. out of shared memory: not a candidate
                    times[str(cfg)] = f"{type(e).__name__}"
    ok = {k: v for k, v in times.items() if isinstance(v, float)}
    best = min(ok, key=ok.get)
    return {"table": list(table_config(M, N, K, (128, 128), x.device.index)), "best": {"config": best, "us": ok[best]},
            "us": times}


def sweep_gemv(x: torch.Tensor, qs: list, copies: int) -> dict:
    """One row: every (BN, split-K, warps) candidate of ``fp8_gemv`` at this shape, against ``gemv_config``'s."""
    from modelgen.runtime.ops.gpu.fp8 import fp8_gemv, gemv_config

    K = x.shape[1]
    N = qs[0][0].shape[0]
    times = {}
    for BN in (16, 32, 64):
        for split in (1, 2, 4, 8, 16):
            if split > -(-K // 128):
                continue
            for warps in (2, 4, 8):
                cfg = (BN, split, warps)
                try:
                    times[str(cfg)] = graph_ms(lambda: [fp8_gemv(x, q, s, (128, 128), config=cfg) for q, s in qs]) \
                        / copies * 1e3
                except Exception as e:
                    times[str(cfg)] = f"{type(e).__name__}"
    ok = {k: v for k, v in times.items() if isinstance(v, float)}
    best = min(ok, key=ok.get)
    return {"table": list(gemv_config(N, K, (128, 128), x.device.index)), "best": {"config": best, "us": ok[best]},
            "us": times}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/h200-fp8-gemm.json")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--sweep-rows", type=int, nargs="*", default=[])
    args = ap.parse_args()

    from modelgen.runtime.layers.linear import linear
    from modelgen.runtime.ops.gpu.fp8 import block_fp8_linear

    res = {"gpu": torch.cuda.get_device_name(0), **measure_ceilings(), "rows": args.rows, "shapes": {}}
    copy = res["hbm_copy_tb_s"] * 1e12
    for name, N, K in SHAPES:
        ws = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * K ** -0.5 for _ in range(args.copies)]
        qs = [quantize_fp8_gpu(w) for w in ws]
        entry = {}
        for M in args.rows:
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            t_fp8 = graph_ms(lambda: [block_fp8_linear(x, q, s) for q, s in qs]) / args.copies * 1e3
            t_lin = graph_ms(lambda: [linear(x, w) for w in ws]) / args.copies * 1e3
            t_mm = graph_ms(lambda: [x @ w.T for w in ws]) / args.copies * 1e3
            entry[str(M)] = {
                "fp8_us": t_fp8, "bf16_linear_us": t_lin, "bf16_matmul_us": t_mm,
                "fp8_weight_bytes_fraction_of_copy_rate": N * K / (t_fp8 * 1e-6) / copy,
                "bf16_weight_bytes_fraction_of_copy_rate": 2 * N * K / (min(t_lin, t_mm) * 1e-6) / copy,
                "fp8_speedup_vs_best_bf16": min(t_lin, t_mm) / t_fp8,
            }
            log(f"{name} [{N}x{K}] M={M}: fp8 {t_fp8:.1f} us, bf16 linear {t_lin:.1f}, matmul {t_mm:.1f} "
                f"-> {entry[str(M)]['fp8_speedup_vs_best_bf16']:.2f}x")
            if M == 1:  # the GEMM kernel at one row too: what the GEMV path replaced
                from modelgen.runtime.ops.gpu.fp8 import table_config

                cfg = (*table_config(1, N, K, (128, 128), x.device.index), 4, 3)
                t_gemm = graph_ms(lambda: [block_fp8_linear(x, q, s, config=cfg) for q, s in qs]) / args.copies * 1e3
                entry["1"]["fp8_gemm_kernel_us"] = t_gemm
                log(f"    one row through the GEMM kernel (table split): {t_gemm:.1f} us")
            if M in args.sweep_rows:
                entry[str(M)]["sweep"] = sweep(x, qs, args.copies)
                if M == 1:
                    entry["1"]["gemv_sweep"] = sweep_gemv(x, qs, args.copies)
                    b = entry["1"]["gemv_sweep"]["best"]
                    from modelgen.runtime.ops.gpu.fp8 import _GEMV_CHOICE

                    chosen = _GEMV_CHOICE.get((N, K, (128, 128), x.dtype, False))
                    entry["1"]["gemv_timed_choice"] = list(chosen) if chosen else None
                    log(f"    gemv sweep best {b['config']} {b['us']:.1f} us; the timed choice {chosen} ran "
                        f"{t_fp8:.1f} us ({t_fp8 / b['us']:.2f}x the best; the table's "
                        f"{entry['1']['gemv_sweep']['table']})")
                best = entry[str(M)]["sweep"]["best"]
                log(f"    sweep best {best['config']} {best['us']:.1f} us "
                    f"({t_fp8 / best['us']:.2f}x the table's {entry[str(M)]['sweep']['table']})")
        res["shapes"][f"{name} {N}x{K}"] = entry
        Path(args.out).write_text(json.dumps(res, indent=2))
        ws = qs = None
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
