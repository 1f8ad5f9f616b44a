#!/usr/bin/env bash
# Issue 11 on the H200: graphed speculative decoding tests and the MTP benchmark, logs and JSON under $OUT.
#   bash bench/mtp_gpu.sh            # tests/test_gpu_speculative.py, then bench/mtp.py on the DeepSeek-V3 shape (~9 min)
#   bash bench/mtp_gpu.sh acceptance [qwen3_next]  # < 240 s: bench/mtp.py on the DeepSeek-V3 (or Qwen3-Next) shape
#       (head trained on the timed rows' own trajectories, plain / K=1 / K=2 graphed, teacher-forced diagnostics),
#       then test_gpu_speculative.py's Qwen3-Next cases (graphed GDN verify) in the time left
#   bash bench/mtp_gpu.sh qwen3_next # bench/mtp.py on the Qwen3-Next shape, graphed and eager speculative rows (~8 min)
# Each bench row: tokens/s of plain decoding (graphs) and of K = 1, 2 with the verify/draft steps replaying CUDA
# graphs (kK) and eager (kK_eager), acceptance, greedy equality and where outputs part (top-2 margin), graph replay
# counts; training prompts (acceptance of a head trained on exactly what the row emits) and held-out prompts, batch
# 1 and 8.
set -o pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
bench() {  # model, output name, budget seconds, extra arguments
  local model=$1 name=$2 budget=$3; shift 3
  timeout $(( budget + 40 )) python3 bench/mtp.py --models "$model" --train-steps 200 --k 1 2 --plain-eager 0 \
    --batches 1 8 --new-tokens 64 --budget-s "$budget" --out "$OUT/$name.json" "$@" 2>&1 \
    | grep -v Warning | tee "$OUT/$name.log"
}
case "${1:-deepseek}" in
  qwen3_next) bench qwen3_next h200-mtp-qwen3_next 420 --eager-k 1 2 --checks 0 ;;
  # <= 240 s in all: rows that would start after 150 s are skipped and listed (the JSON is rewritten per row set),
  # then the Gated DeltaNet graphed-verify GPU tests (Qwen3-Next, K = 1, 2, 3) in the time left
  acceptance)
    bench "${2:-deepseek}" "h200-mtp-${2:-deepseek}-acceptance" 150 --eager-k --checks 1 --train-len 64 \
      --fixed-kernel-rows 1
    left=$(( 232 - ($(date +%s) - t0) ))
    echo "[$(( $(date +%s) - t0 ))s] bench done; GDN graph tests for ${left}s"
    timeout $(( left > 10 ? left : 10 )) python3 -m pytest -v -rs tests/test_gpu_speculative.py -k qwen3_next \
      -p no:cacheprovider 2>&1 | grep -v Warning | tee "$OUT/h200-gpu-speculative-gdn-tests.log" ;;
  *)
    timeout 200 python3 -m pytest -q -rs tests/test_gpu_speculative.py -p no:cacheprovider 2>&1 | tail -40 \
      | tee "$OUT/h200-gpu-speculative-tests.log"
    echo "[$(( $(date +%s) - t0 ))s] tests done"
    left=$(( 540 - ($(date +%s) - t0) ))
    bench deepseek h200-mtp-deepseek $(( left > 120 ? left - 40 : 80 )) --eager-k 1 2 --checks 0 ;;
esac
echo "[$(( $(date +%s) - t0 ))s] done"
