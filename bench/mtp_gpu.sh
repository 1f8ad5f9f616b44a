#!/usr/bin/env bash
# Issue 11 on the H200: graphed speculative decoding tests and the MTP benchmark, logs and JSON under $OUT.
#   bash bench/mtp_gpu.sh            # tests/test_gpu_speculative.py, then bench/mtp.py on the DeepSeek-V3 shape (~9 min)
#   bash bench/mtp_gpu.sh qwen3_next # bench/mtp.py on the Qwen3-Next shape (GDN: eager verify, graphed draft) (~8 min)
# Each bench row: tokens/s of plain decoding (graphs) and of K = 1, 2 with the verify/draft steps replaying CUDA
# graphs (kK) and eager (kK_eager), acceptance, greedy equality, graph replay counts; training prompts (acceptance of
# a trained head) and held-out prompts, batch 1 and 8.
set -o pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
bench() {  # model, budget seconds
  timeout $(( $2 + 40 )) python3 bench/mtp.py --models "$1" --train-steps 200 --k 1 2 --eager-k 1 2 --plain-eager 0 \
    --checks 0 --batches 1 8 --new-tokens 64 --budget-s "$2" --out "$OUT/h200-mtp-$1.json" 2>&1 \
    | grep -v Warning | tee "$OUT/h200-mtp-$1.log"
}
if [ "${1:-deepseek}" = qwen3_next ]; then
  bench qwen3_next 420
else
  timeout 200 python3 -m pytest -q -rs tests/test_gpu_speculative.py -p no:cacheprovider 2>&1 | tail -40 \
    | tee "$OUT/h200-gpu-speculative-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done"
  left=$(( 540 - ($(date +%s) - t0) ))
  bench deepseek $(( left > 120 ? left - 40 : 80 ))
fi
echo "[$(( $(date +%s) - t0 ))s] done"
