#!/usr/bin/env bash
# One device call of the GPU session (H200): GPU tests and benchmarks in sequence, logs and JSON under $OUT.
#   bash bench/gpu_session.sh 1   # GDN tests, Qwen3-Next bench, test_gpu + test_gpu_moe, gpt-oss bench (bf16 + MXFP4)
#   bash bench/gpu_session.sh 2   # MLA/window/GPU/MoE tests, DeepSeek-V3 bench (bf16 + FP8), gpt-oss (bf16 + MXFP4)
#   bash bench/gpu_session.sh diag  # GDN tests but fla's, run --device cuda, Qwen3-Next 4-layer per-component logit diagnosis
#   bash bench/gpu_session.sh fp8   # FP8 block-scaled GEMM tests + bench/fp8_gemm.py (FP8 kernel vs dequantized bf16)
#   bash bench/gpu_session.sh x2  # on nvidia-h200-x2: MLA/window kernel tests (GPU 1) beside the DeepSeek-V3 bench
#                                 # (GPU 0), then TP=2 vs TP=1 (bench/tp.py), then gpt-oss (GPU 0) beside MTP (GPU 1)
#   bash bench/gpu_session.sh s31a|s31b|s31c|s31d  # issue 29 part 4: GDN verify window kernel, checkpoint rewind, final GPU suite
#   bash bench/gpu_session.sh s32a|s32c  # issue 29 item 4: the speculative step's host gap (chained drafts advanced on the device)
#   bash bench/gpu_session.sh s34a  # issue 29: paged decode split rule A/B (Llama-3-8B bs32), gpt-oss bs1 MoE path timings
#   bash bench/gpu_session.sh s34s  # issue 29 item 4: step timeline (--timeline) + pinned ring A/B (--switch-legs ring)
#   bash bench/gpu_session.sh s34b  # issue 29: MoE/GDN tests; A/B of SHARED_SLOT, FUSED_PROJECTIONS, SORTED_TILE_CANDIDATES
#   bash bench/gpu_session.sh s34c  # issue 29: the folded shared expert end to end vs transformers; SHARED_SLOT A/B again
#   bash bench/gpu_session.sh s34z  # issue 29: every GPU test (but fla's) on the final code; Qwen3-Next + MoE defaults
#   bash bench/gpu_session.sh 3   # Qwen3-Next bench (torch chunked prefill, HF greedy on its torch GDN path), gpt-oss eager
# Wheels carried in .whl/ (fla-core; for tests/test_gpu.py::test_modelgen_run_device_cuda, whose CLI subprocess imports
# codegen: pydantic 2.14.4, pydantic_core 2.50.5, annotated_types 0.8.0, typing_inspection 0.4.5, ruamel.yaml 0.19.1,
# libcst 1.9.0 -- the device image has none of them) are installed to /tmp/site first.
set -o pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=$PWD:/tmp/site
else
  export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv | tee "$OUT/gpu.txt"
python3 -c 'import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)'
t0=$(date +%s)
phase=${1:-1}
if [ "$phase" = s34a ]; then  # nvidia-h200, ~420 s: the paged decode's split rule (attention kernel tests; Llama-3-8B
  # A/B of SPLIT_ONE_WAVE as paired legs at batch 32, batch 1 as a control, profiles of both legs at 32); gpt-oss bs1
  # with the MoE path timings it chose from and a per-kernel profile
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 120 python3 -m pytest -q -rfs -n 8 -p no:cacheprovider tests/test_gpu.py tests/test_attention_splits.py \
    tests/test_gpu_attention_window.py tests/test_gpu_qk_norm_rope.py 2>&1 | grep -v Warning \
    | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error\|assert" | tail -30 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  timeout -k 10 230 python3 bench/gdn_ab.py --switch attn_split --batches 32 1 --reps 4 --new 128 --profile-batches 32 \
    --budget-s 215 --out "$OUT/h200-llama8b-attn-split-ab.json" 2>&1 | grep -v "Warning\|it/s" | tail -30 > "$L/2-attn-split.log"
  rm -rf /tmp/modelgen-bench-llama
  echo "[$(( $(date +%s) - t0 ))s] attn split A/B done" | tee -a "$L/2-attn-split.log"
  timeout -k 10 80 python3 -m bench.gpt_oss --layers 4 --batches 1 --systems modelgen --profile --budget-s 70 \
    --out "$OUT/h200-gpt-oss-s34a.json" 2>&1 | grep -v Warning | grep -v "it/s" | tail -45 > "$L/3-gpt-oss.log"
  echo "[$(( $(date +%s) - t0 ))s] gpt-oss done" | tee -a "$L/3-gpt-oss.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s34a.log"; rm -rf "$L"
  cat "$OUT/s34a.log"
elif [ "$phase" = s34b ]; then
  # nvidia-h200, ~520 s: the MoE / GDN kernel tests (sorted-tile candidates, shared slot, fused projections); then three
  # paired A/Bs in bench/gdn_ab.py: the gated shared expert as slot E of the fused MoE (SHARED_SLOT, Qwen3-Next shape,
  # bs1 + bs32, profiles at bs1), the four GDN projections as one GEMV (FUSED_PROJECTIONS, same checkpoint), and the
  # narrower sorted-path tiles in the small-batch MoE choice (SORTED_TILE_CANDIDATES, gpt-oss-20b shape, bs1)
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 150 python3 -m pytest -q -rfs -n 8 -p no:cacheprovider tests/test_gpu_moe.py tests/test_gpu_moe_bias.py \
    tests/test_gpu_moe_shared_slot.py tests/test_gdn_fused_projections.py tests/test_gpu_gdn.py -k "not fla" 2>&1 \
    | grep -v Warning | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error\|assert" | tail -30 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  timeout -k 10 175 python3 bench/gdn_ab.py --switch sharedslot --batches 1 32 --reps 4 --profile-batches 1 \
    --budget-s 150 --out "$OUT/h200-qwen3-next-sharedslot-ab.json" 2>&1 | grep -v "Warning\|it/s" | tail -40 > "$L/2-sharedslot.log"
  echo "[$(( $(date +%s) - t0 ))s] shared slot A/B done" | tee -a "$L/2-sharedslot.log"
  timeout -k 10 135 python3 bench/gdn_ab.py --switch gdn_proj --reuse-ckpt --batches 1 32 --reps 4 --profile-batches \
    --budget-s 115 --out "$OUT/h200-qwen3-next-gdn-proj-ab.json" 2>&1 | grep -v "Warning\|it/s" | tail -16 > "$L/3-gdn-proj.log"
  rm -rf /tmp/modelgen-bench-qwen3_next
  echo "[$(( $(date +%s) - t0 ))s] gdn proj A/B done" | tee -a "$L/3-gdn-proj.log"
  timeout -k 10 100 python3 bench/gdn_ab.py --switch moe_tiles --batches 1 --reps 4 --profile-batches 1 --budget-s 80 \
    --out "$OUT/h200-gpt-oss-moe-tiles-ab.json" 2>&1 | grep -v "Warning\|it/s" | tail -30 > "$L/4-moe-tiles.log"
  rm -rf /tmp/modelgen-bench-gpt_oss
  echo "[$(( $(date +%s) - t0 ))s] moe tiles A/B done" | tee -a "$L/4-moe-tiles.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s34b.log"; rm -rf "$L"
  cat "$OUT/s34b.log"
elif [ "$phase" = s34z ]; then  # (ran at 73d0b115: 475 passed)
  # nvidia-h200, ~480 s: every GPU test (but fla's) on the final code of issue 29 part 3; the Qwen3-Next shape
  # (8 layers) with every default chosen (FUSED_DECODE, FUSED_PROJECTIONS, SHARED_SLOT) at bs1 and bs32; the DeepSeek
  # speculative rows again on the one-buffer upload (the ring gone), with their timeline
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 220 python3 -m pytest -q -rfs -n 8 -p no:cacheprovider tests/test_gpu*.py tests/test_pdl.py -k "not fla" \
    2>&1 | grep -v Warning | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error" | tail -40 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  timeout -k 10 150 python3 bench/arch.py --model qwen3_next --layers 8 --batches 1 32 --systems modelgen \
    --budget-s 135 --out "$OUT/h200-qwen3-next-s34z.json" 2>&1 | grep -v "Warning\|it/s" | tail -12 > "$L/2-qwen3-next.log"
  rm -rf /tmp/modelgen-bench-qwen3_next*
  echo "[$(( $(date +%s) - t0 ))s] qwen3-next done" | tee -a "$L/2-qwen3-next.log"
  timeout -k 10 110 python3 bench/spec_oracle.py --models deepseek --layers 8 --batches 1 --k 3 --p 0.8 0.9 \
    --host-k --timeline --new-tokens 128 --reps 3 --budget-s 90 --out "$OUT/h200-spec-oracle-deepseek-s34z.json" 2>&1 \
    | grep -v "Warning\|warn\|it/s" | grep "tok/s\|replay\|timeline\|Error\|error" | tail -20 > "$L/3-spec.log"
  echo "[$(( $(date +%s) - t0 ))s] spec oracle done" | tee -a "$L/3-spec.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s34z.log"; rm -rf "$L"
  cat "$OUT/s34z.log"
elif [ "$phase" = s34c ]; then
  # nvidia-h200, ~230 s: the folded shared expert through the whole generated Qwen3-Next against transformers (switch
  # on and off); the SHARED_SLOT A/B again with the budget s34b lacked (its legs were captured but no rep was timed)
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 60 python3 -m pytest -q -rfs -n 4 -p no:cacheprovider tests/test_gpu_moe_shared_slot.py 2>&1 \
    | grep -v Warning | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error\|assert" | tail -20 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  timeout -k 10 215 python3 bench/gdn_ab.py --switch sharedslot --batches 1 32 --reps 4 --profile-batches 1 \
    --budget-s 195 --out "$OUT/h200-qwen3-next-sharedslot-ab.json" 2>&1 | grep -v "Warning\|it/s" | grep -v "^  " \
    | tail -40 > "$L/2-sharedslot.log"
  rm -rf /tmp/modelgen-bench-qwen3_next
  echo "[$(( $(date +%s) - t0 ))s] shared slot A/B done" | tee -a "$L/2-sharedslot.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s34c.log"; rm -rf "$L"
  cat "$OUT/s34c.log"
elif [ "$phase" = s34s ]; then  # (ran at 3a233864; the ring lost and went with its switch: bench/NOTES-mtp.md)
  # nvidia-h200, <= ~300 s: the graphed speculative GPU tests; bench/spec_oracle.py on the DeepSeek-V3 and Qwen3-Next
  # shapes (8 layers), K = 3, batch 1 and 8, p 0.8 / 0.9, each resident row with its per-phase CUDA-event timeline
  # (--timeline: GPU time per phase, GPU gaps between phases) and paired with the same row without the pinned host
  # buffer ring (--switch-legs ring: cuda_graphs.STEP_PINNED_RING off, one pinned buffer per bucket)
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 60 python3 -m pytest -q -rfs -n 8 -p no:cacheprovider tests/test_gpu_speculative.py 2>&1 \
    | grep -v Warning | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error\|assert" | tail -40 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  for m in deepseek qwen3_next; do
    timeout -k 10 115 python3 bench/spec_oracle.py --models $m --layers 8 --batches 1 8 --k 3 --p 0.8 0.9 \
      --host-k --switch-legs ring --timeline --new-tokens 128 --reps 3 --budget-s 90 \
      --out "$OUT/h200-spec-oracle-$m-s34s.json" 2>&1 | grep -v "Warning\|warn\|it/s" \
      | grep "tok/s\|replay\|timeline\|Error\|error" | tail -40 > "$L/2-spec-$m.log"
    echo "[$(( $(date +%s) - t0 ))s] spec oracle $m done" | tee -a "$L/2-spec-$m.log"
  done
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s34s.log"; rm -rf "$L"
  cat "$OUT/s34s.log"
elif [ "$phase" = s32c ]; then  # (ran at 606ca24, with --step-legs; both it and the chained-draft advance are gone)
  # nvidia-h200, ~140 s, what was left after a machine was taken back mid-call: the paired oracle rows of the
  # host-filled + two-copy chained advance, p 0.8 (every row was skipped: --budget-s counts from checkpoint creation)
  for m in qwen3_next deepseek; do
    timeout -k 5 75 python3 bench/spec_oracle.py --models $m --layers 8 --batches 1 8 --k 3 --p 0.8 \
      --host-k --step-legs no-overlap --new-tokens 128 --reps 3 --budget-s 50 \
      --out "$OUT/h200-spec-oracle-$m-s32c.json" 2>&1 | grep -v "Warning\|warn\|it/s" \
      | grep "tok/s\|replay\|Error\|error" | tail -30 | tee -a "$OUT/s32c.log"
    echo "[$(( $(date +%s) - t0 ))s] spec oracle $m done" | tee -a "$OUT/s32c.log"
  done
elif [ "$phase" = s32a ]; then  # (ran at 843b730 with --step-legs: chained inputs advanced by torch arithmetic inside
  # the graph + rewind after the draft launch, vs neither; the advance and the switch are gone)
  # nvidia-h200, ~480 s: the graphed speculative GPU tests; bench/spec_oracle.py on the
  # DeepSeek-V3 and Qwen3-Next shapes (8 layers), K = 3, batch 1 and 8, p 0.8 / 0.9, each resident row paired with the
  # step before the host-gap change (--step-legs no-overlap: one host fill per chained draft run, rewind first)
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 110 python3 -m pytest -q -rfs -n 8 -p no:cacheprovider tests/test_gpu_speculative.py tests/test_gpu_gdn.py \
    -k "not fla" 2>&1 | grep -v Warning | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error\|assert" | tail -40 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  for m in qwen3_next deepseek; do
    timeout -k 10 170 python3 bench/spec_oracle.py --models $m --layers 8 --batches 1 8 --k 3 --p 0.8 0.9 \
      --host-k --step-legs no-overlap --new-tokens 128 --reps 5 --budget-s 140 \
      --out "$OUT/h200-spec-oracle-$m-s32a.json" 2>&1 | grep -v "Warning\|warn\|it/s" \
      | grep "tok/s\|replay\|Error\|error" | tail -30 > "$L/2-spec-$m.log"
    echo "[$(( $(date +%s) - t0 ))s] spec oracle $m done" | tee -a "$L/2-spec-$m.log"
  done
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s32a.log"; rm -rf "$L"
  cat "$OUT/s32a.log"
elif [ "$phase" = s31a ]; then  # (ran at 87ecfce, before --gdn-window-legs became --gdn-legs loop) nvidia-h200, ~220 s: the GDN kernel tests (window_decode vs the per-slot loop, bitwise)
  # and the graphed speculative tests; bench/spec_oracle.py on the Qwen3-Next shape (8 layers) with each resident row
  # paired with the per-slot GDN verify (--gdn-window-legs), K = 1..3, batch 1 and 8, p 0.8 / 0.9, graph replay times
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 150 python3 -m pytest -q -rfs -n 8 -p no:cacheprovider tests/test_gpu_gdn.py \
    tests/test_gpu_speculative.py -k "not fla" 2>&1 | grep -v Warning \
    | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error\|assert" | tail -40 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  timeout -k 10 280 python3 bench/spec_oracle.py --models qwen3_next --layers 8 --batches 1 8 --k 3 2 1 --p 0.8 0.9 \
    --host-k --gdn-window-legs 1 --new-tokens 128 --reps 3 --budget-s 250 \
    --out "$OUT/h200-spec-oracle-qwen3-next-window.json" 2>&1 | grep -v "Warning\|warn\|it/s" \
    | grep "tok/s\|replay\|Error\|error\|checkpoint" | tail -60 > "$L/2-spec.log"
  echo "[$(( $(date +%s) - t0 ))s] spec oracle done" | tee -a "$L/2-spec.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s31a.log"; rm -rf "$L"
  cat "$OUT/s31a.log"
elif [ "$phase" = s31d ]; then  # nvidia-h200, ~200 s: the Qwen3-Next K = 3 rows a third time (s31b and s31c gave
  # 1.11x and 0.92x at batch 1, p 0.8: run-to-run spread), 5 repeats a leg, rewind vs snapshot paired
  timeout -k 10 200 python3 bench/spec_oracle.py --models qwen3_next --layers 8 --batches 1 8 --k 3 --p 0.8 0.9 \
    --host-k --gdn-legs no-ck --new-tokens 128 --reps 5 --budget-s 170 \
    --out "$OUT/h200-spec-oracle-qwen3-next-s31d.json" 2>&1 | grep -v "Warning\|warn\|it/s" \
    | grep "tok/s\|replay\|Error\|error" | tail -30 > "$OUT/s31d.log"
  cat "$OUT/s31d.log"
elif [ "$phase" = s31c ]; then  # nvidia-h200, ~420 s: every GPU test (but fla's) on the final code; the Qwen3-Next
  # oracle rows at K = 3 again (checkpoint rewind vs snapshot / re-advance, paired) with a host profile at batch 1
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 220 python3 -m pytest -q -rfs -n 8 -p no:cacheprovider tests/test_gpu*.py tests/test_pdl.py -k "not fla" \
    2>&1 | grep -v Warning | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error" | tail -60 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  timeout -k 10 170 python3 bench/spec_oracle.py --models qwen3_next --layers 8 --batches 1 8 --k 3 --p 0.8 0.9 \
    --host-k --gdn-legs no-ck --new-tokens 128 --reps 3 --profile 1 --budget-s 140 \
    --out "$OUT/h200-spec-oracle-qwen3-next-s31c.json" 2>&1 | grep -v "Warning\|warn\|it/s" \
    | grep "tok/s\|replay\|profile\|Error\|error" | tail -30 > "$L/2-spec.log"
  echo "[$(( $(date +%s) - t0 ))s] spec oracle done" | tee -a "$L/2-spec.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s31c.log"; rm -rf "$L"
  cat "$OUT/s31c.log"
elif [ "$phase" = s31b ]; then  # (ran at 18f2272, before the loop leg went) nvidia-h200, ~300 s: GDN + graphed speculative tests (checkpoint rewind); the
  # Qwen3-Next oracle rows with each resident row paired with its GDN variants (no-ck: window kernel, snapshot /
  # re-advance; loop: the per-slot path before window_decode); plain Qwen3-Next bs1 with its per-kernel profile
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 150 python3 -m pytest -q -rfs -n 8 -p no:cacheprovider tests/test_gpu_gdn.py \
    tests/test_gpu_speculative.py -k "not fla" 2>&1 | grep -v Warning \
    | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error" | tail -40 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  timeout -k 10 270 python3 bench/spec_oracle.py --models qwen3_next --layers 8 --batches 1 8 --k 3 2 1 --p 0.8 0.9 \
    --host-k --gdn-legs no-ck loop --new-tokens 128 --reps 3 --budget-s 240 \
    --out "$OUT/h200-spec-oracle-qwen3-next-ck.json" 2>&1 | grep -v "Warning\|warn\|it/s" \
    | grep "tok/s\|replay\|Error\|error\|checkpoint" | tail -80 > "$L/2-spec.log"
  echo "[$(( $(date +%s) - t0 ))s] spec oracle done" | tee -a "$L/2-spec.log"
  timeout -k 10 100 python3 -m bench.qwen3_next --systems modelgen --batches 1 --profile --profile-batches 1 \
    --budget-s 90 --out "$OUT/h200-qwen3-next-s31.json" 2>&1 | grep -v Warning | grep -v "it/s" | tail -45 \
    > "$L/3-qwen3-next.log"
  echo "[$(( $(date +%s) - t0 ))s] qwen3-next done" | tee -a "$L/3-qwen3-next.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s31b.log"; rm -rf "$L"
  cat "$OUT/s31b.log"
elif [ "$phase" = s30b ]; then  # nvidia-h200, ~420 s: every GPU test (speculative steps now device-resident by
  # default) beside nothing else; then bench/spec_oracle.py on the DeepSeek-V3 shape (8 layers): speed-up over plain
  # decode at oracle acceptance 0.5 / 0.7 / 0.8 / 0.9, K = 1..3, batch 1 and 8, and the host-read path at K = 3
  timeout -k 10 200 python3 -m pytest -q -rfs -n 8 -p no:cacheprovider tests/test_gpu*.py tests/test_pdl.py -k "not fla" \
    2>&1 | grep -v Warning | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error\|assert" | tail -60 > "$OUT/s30b-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$OUT/s30b-tests.log"
  timeout -k 10 300 python3 bench/spec_oracle.py --models deepseek --layers 8 --batches 1 8 --k 1 2 3 \
    --p 0.5 0.7 0.8 0.9 --host-k 3 --new-tokens 128 --reps 3 --budget-s 270 --out "$OUT/h200-spec-oracle-deepseek.json" \
    2>&1 | grep -v "Warning\|warn\|it/s" | tail -50 > "$OUT/s30b-spec-oracle.log"
  echo "[$(( $(date +%s) - t0 ))s] spec oracle done" | tee -a "$OUT/s30b-spec-oracle.log"
  cat "$OUT/s30b-tests.log" "$OUT/s30b-spec-oracle.log"
elif [ "$phase" = s30c ]; then  # nvidia-h200, ~330 s: bench/spec_oracle.py on the Qwen3-Next shape (8 layers: 6
  # Gated DeltaNet + 2 attention), then the DeepSeek-V3 shape's K = 3 rows again (p 0.8 / 0.9, a repeat of s30b's) with
  # the GPU time of each graph a step replays (the rest of a step's wall time is host time)
  timeout -k 10 230 python3 bench/spec_oracle.py --models qwen3_next --layers 8 --batches 1 8 --k 1 2 3 \
    --p 0.5 0.7 0.8 0.9 --host-k 3 --new-tokens 128 --reps 3 --budget-s 200 --out "$OUT/h200-spec-oracle-qwen3-next.json" \
    2>&1 | grep -v "Warning\|warn\|it/s" | grep "tok/s\|replay\|Error\|error" | tail -40 > "$OUT/s30c-spec-oracle.log"
  echo "[$(( $(date +%s) - t0 ))s] qwen3-next done" | tee -a "$OUT/s30c-spec-oracle.log"
  timeout -k 10 120 python3 bench/spec_oracle.py --models deepseek --layers 8 --batches 1 8 --k 3 --p 0.8 0.9 \
    --host-k --new-tokens 128 --reps 3 --budget-s 100 --out "$OUT/h200-spec-oracle-deepseek-k3.json" 2>&1 \
    | grep -v "Warning\|warn\|it/s" | grep "tok/s\|replay\|Error\|error" | tail -20 >> "$OUT/s30c-spec-oracle.log"
  echo "[$(( $(date +%s) - t0 ))s] deepseek done" | tee -a "$OUT/s30c-spec-oracle.log"
  cat "$OUT/s30c-spec-oracle.log"
elif [ "$phase" = s30d ]; then  # nvidia-h200, ~420 s: every GPU test on the final speculative code (rollback
  # re-advance through the verify graph); Qwen3-Next and DeepSeek-V3 oracle rows again with a host profile of the
  # K = 3 steps at batch 1
  timeout -k 10 200 python3 -m pytest -q -rfs -n 8 -p no:cacheprovider tests/test_gpu*.py tests/test_pdl.py -k "not fla" \
    2>&1 | grep -v Warning | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error" | tail -40 > "$OUT/s30d-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$OUT/s30d-tests.log"
  timeout -k 10 130 python3 bench/spec_oracle.py --models qwen3_next --layers 8 --batches 1 8 --k 1 2 3 --p 0.8 0.9 \
    --host-k 3 --new-tokens 128 --reps 3 --profile 1 --budget-s 110 --out "$OUT/h200-spec-oracle-qwen3-next-s30d.json" \
    2>&1 | grep -v "Warning\|warn\|it/s" | grep "tok/s\|replay\|profile\|Error\|error" | tail -30 > "$OUT/s30d-spec.log"
  echo "[$(( $(date +%s) - t0 ))s] qwen3-next done" | tee -a "$OUT/s30d-spec.log"
  timeout -k 10 110 python3 bench/spec_oracle.py --models deepseek --layers 8 --batches 1 8 --k 3 \
    --p 0.5 0.7 0.8 0.9 --host-k 3 --new-tokens 128 --reps 3 --profile 1 --budget-s 90 \
    --out "$OUT/h200-spec-oracle-deepseek-s30d.json" 2>&1 | grep -v "Warning\|warn\|it/s" \
    | grep "tok/s\|replay\|profile\|Error\|error" | tail -20 >> "$OUT/s30d-spec.log"
  echo "[$(( $(date +%s) - t0 ))s] deepseek done" | tee -a "$OUT/s30d-spec.log"
  cat "$OUT/s30d-tests.log" "$OUT/s30d-spec.log"
elif [ "$phase" = s29a ]; then  # nvidia-h200, ~550 s: every GPU test (but fla's); per-kernel profiles of the MoE
  # layer at bs1 (moe_layer stages vs byte-time), Qwen3-Next bs1 + bs32, gpt-oss bs1, Llama-3-8B bs32 (weights + KV)
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 150 python3 -m pytest -q -rfs -n 8 -p no:cacheprovider tests/test_gpu*.py tests/test_pdl.py -k "not fla" \
    2>&1 | grep -v Warning | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error" | tail -40 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  timeout -k 10 55 python3 -m bench.moe_layer --layers 8 --batches 1 --modes pdl --budget-s 45 \
    --out "$OUT/h200-moe-layer-s29.json" 2>&1 | grep -v Warning | tail -24 > "$L/2-moe-layer.log"
  echo "[$(( $(date +%s) - t0 ))s] moe layer done" | tee -a "$L/2-moe-layer.log"
  timeout -k 10 150 python3 -m bench.qwen3_next --systems modelgen --batches 1 32 --profile --profile-batches 1 32 \
    --budget-s 140 --out "$OUT/h200-qwen3-next-s29.json" 2>&1 | grep -v Warning | grep -v "it/s" | tail -70 \
    > "$L/3-qwen3-next.log"
  rm -rf /tmp/modelgen-bench-qwen3_next
  echo "[$(( $(date +%s) - t0 ))s] qwen3-next done" | tee -a "$L/3-qwen3-next.log"
  timeout -k 10 80 python3 -m bench.gpt_oss --layers 4 --batches 1 --systems modelgen --profile --budget-s 70 \
    --out "$OUT/h200-gpt-oss-s29.json" 2>&1 | grep -v Warning | grep -v "it/s" | tail -45 > "$L/4-gpt-oss.log"
  rm -rf /tmp/modelgen-bench-gpt_oss
  echo "[$(( $(date +%s) - t0 ))s] gpt-oss done" | tee -a "$L/4-gpt-oss.log"
  timeout -k 10 120 python3 bench/decode.py --batches 32 --systems modelgen --prefill --skip-load --profile-batches 32 \
    --out "$OUT/h200-llama8b-s29.json" 2>&1 | grep -v Warning | grep -v "it/s" | tail -45 > "$L/5-llama8b.log"
  echo "[$(( $(date +%s) - t0 ))s] llama done" | tee -a "$L/5-llama8b.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s29a.log"; rm -rf "$L"
  cat "$OUT/s29a.log"
elif [ "$phase" = s29b ]; then  # (ran at c3f876b: its fused leg, the gated norm inside the delta-rule kernel, lost
  # and was replaced by s29c's) nvidia-h200, ~280 s: GDN decode fused vs unfused as paired legs in one process
  # (bench/gdn_ab.py, bs1 + bs32, profiles of both legs); the GDN tests (both decode paths in the engine test) and the
  # CLI subprocess test; the gpt-oss bs1 profile s29a's budget skipped
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 100 python3 -m pytest -q -rfs -n 8 -p no:cacheprovider tests/test_gpu_gdn.py tests/test_gpu_helpers.py \
    "tests/test_gpu.py::test_modelgen_run_device_cuda" -k "not fla" 2>&1 | grep -v Warning \
    | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error" | tail -30 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  timeout -k 10 250 python3 -m bench.gdn_ab --batches 1 32 --reps 6 --profile-batches 1 32 --budget-s 240 \
    --out "$OUT/h200-qwen3-next-gdn-ab.json" 2>&1 | grep -v Warning | grep -v "it/s" | tail -40 > "$L/2-gdn-ab.log"
  rm -rf /tmp/modelgen-bench-qwen3_next
  echo "[$(( $(date +%s) - t0 ))s] gdn a/b done" | tee -a "$L/2-gdn-ab.log"
  timeout -k 10 100 python3 -m bench.gpt_oss --layers 4 --batches 1 --systems modelgen --profile --budget-s 95 \
    --out "$OUT/h200-gpt-oss-s29b.json" 2>&1 | grep -v Warning | grep -v "it/s" | tail -40 > "$L/3-gpt-oss.log"
  echo "[$(( $(date +%s) - t0 ))s] gpt-oss done" | tee -a "$L/3-gpt-oss.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s29b.log"; rm -rf "$L"
  cat "$OUT/s29b.log"
elif [ "$phase" = s29c ]; then  # nvidia-h200, ~230 s: the second fused GDN leg (gating inside the delta-rule
  # kernel, the norm kept apart) against the unfused chain, paired in one process; the GDN kernel + engine tests
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 70 python3 -m pytest -q -rfs -n 8 -p no:cacheprovider tests/test_gpu_gdn.py -k "not fla" 2>&1 \
    | grep -v Warning | grep "FAILED\|SKIPPED\|ERROR\|passed\|failed\|Error" | tail -20 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  timeout -k 10 190 python3 -m bench.gdn_ab --batches 1 32 --reps 8 --profile-batches 1 --budget-s 180 \
    --out "$OUT/h200-qwen3-next-gdn-ab-gating.json" 2>&1 | grep -v Warning | grep -v "it/s" | grep -v "us/step" \
    | tail -30 > "$L/2-gdn-ab.log"
  echo "[$(( $(date +%s) - t0 ))s] gdn a/b done" | tee -a "$L/2-gdn-ab.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s29c.log"; rm -rf "$L"
  cat "$OUT/s29c.log"
elif [ "$phase" = diag ]; then
  timeout 130 python3 -m pytest -q -rs tests/test_gpu_gdn.py -k "not fla" -p no:cacheprovider 2>&1 | tee "$OUT/h200-gpu-gdn-tests-2.log"
  echo "[$(( $(date +%s) - t0 ))s] gdn tests done"
  timeout 60 python3 -m pytest -q -x tests/test_gpu.py -k test_modelgen_run_device_cuda -p no:cacheprovider 2>&1 \
    | grep -v "^\s*init\|Warning" | tail -60 | tee "$OUT/h200-run-device-cuda.log"
  timeout 200 python3 -m bench.qwen3_next --layers 4 --diagnose --systems modelgen --batches 1 --new 8 --budget-s 190 \
    --out "$OUT/h200-qwen3-next-diagnose.json" 2>&1 | grep -v Warning | tee "$OUT/h200-qwen3-next-diagnose.log"
elif [ "$phase" = probe ]; then  # nvidia-h200-x2: all-reduce kernels, TP=2 vs TP=1 with token check, GPU tests
  python3 --version; python3 -m pip show pydantic fastapi uvicorn openai 2>&1 | grep -E "^(Name|Version)"
  timeout 120 python3 bench/allreduce.py --out "$OUT/h200x2-allreduce.json" 2>&1 | grep -v Warning | tail -30 \
    | tee "$OUT/h200x2-allreduce.log"
  echo "[$(( $(date +%s) - t0 ))s] allreduce done"
  timeout 260 python3 bench/tp.py --batches 1 8 32 --new 64 --reps 2 --check-prompts 2 \
    --out "$OUT/h200x2-llama8b-tp.json" 2>&1 | grep -v Warning | tail -40 | tee "$OUT/h200x2-llama8b-tp.log"
  echo "[$(( $(date +%s) - t0 ))s] tp done"
  (CUDA_VISIBLE_DEVICES=1 timeout 170 python3 -m pytest -q -rs tests/test_gpu_mla.py tests/test_gpu_attention_window.py \
    tests/test_gpu_qk_norm_rope.py tests/test_gpu_fp8.py tests/test_gpu_gdn.py -k "not fla" -p no:cacheprovider 2>&1 \
    | tail -25 > "$OUT/h200-gpu-tests-b.log") &
  CUDA_VISIBLE_DEVICES=0 timeout 170 python3 -m pytest -q -rs -n 3 tests/test_gpu.py tests/test_gpu_moe.py \
    tests/test_fused_allreduce_norm.py -p no:cacheprovider 2>&1 | tail -25 > "$OUT/h200-gpu-tests-a.log"
  wait
  cat "$OUT/h200-gpu-tests-a.log" "$OUT/h200-gpu-tests-b.log"
elif [ "$phase" = call2 ]; then  # nvidia-h200-x2, ~580 s: TP variants; MoE layer A/B | GPU tests; serve | MTP
  L="$OUT/logs"; mkdir -p "$L"
  timeout 230 python3 bench/tp.py --batches 1 8 32 --new 64 --reps 2 --check-prompts 2 --variants default gloo-nccl \
    --out "$OUT/h200x2-llama8b-tp.json" 2>&1 | grep -v Warning | tail -40 > "$L/1-tp.log"
  echo "[$(( $(date +%s) - t0 ))s] tp done" | tee -a "$L/1-tp.log"
  (CUDA_VISIBLE_DEVICES=1 timeout 200 python3 -m pytest -q -rs tests/test_gpu_speculative.py -p no:cacheprovider 2>&1 \
    | tail -30 > "$L/2-spec-tests.log") &
  (CUDA_VISIBLE_DEVICES=1 timeout 200 python3 -m pytest -q -rs tests/test_gpu_fp8.py tests/test_fp8_keep.py \
    tests/test_mxfp4_keep.py -p no:cacheprovider 2>&1 | grep -v Warning | tail -30 > "$L/2-quant-tests.log") &
  (CUDA_VISIBLE_DEVICES=1 timeout 200 python3 -m pytest -q -rs tests/test_pdl.py tests/test_gpu_moe.py \
    -p no:cacheprovider 2>&1 | grep -v Warning | tail -25 > "$L/2-moe-pdl-tests.log") &
  CUDA_VISIBLE_DEVICES=0 timeout 200 python3 -m bench.moe_layer --layers 8 --batches 1 \
    --modes base pdl --out "$OUT/h200-moe-layer.json" 2>&1 | grep -v Warning | tail -80 \
    > "$L/2-moe-layer.log"
  wait
  echo "[$(( $(date +%s) - t0 ))s] moe layer + tests done" | tee -a "$L/2-moe-layer.log"
  PYV=$(python3 -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site --find-links ../.whl/serve \
    -r ../.whl/serve/requirements-$PYV.txt > "$L/3-pip.log" 2>&1
  (CUDA_VISIBLE_DEVICES=1 timeout 165 python3 bench/mtp.py --models deepseek --train-steps 200 --k 1 2 --eager-k 1 \
    --plain-eager 0 --checks 0 --batches 1 8 --new-tokens 64 --budget-s 150 --out "$OUT/h200-mtp-deepseek.json" 2>&1 \
    | grep -v Warning | tail -40 > "$L/3-mtp.log") &
  CUDA_VISIBLE_DEVICES=0 PYTHONPATH=$PYTHONPATH:/tmp/site timeout 165 python3 bench/serve.py --shape llama3-8b \
    --device cuda --target rocm --clients 1 8 32 --max-tokens 128 --budget-s 150 --out "$OUT/h200-llama8b-serve.json" \
    2>&1 | grep -v Warning | tail -40 > "$L/3-serve.log"
  wait
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/call2.log"; rm -rf "$L"
  cat "$OUT/call2.log"
elif [ "$phase" = call3 ]; then  # nvidia-h200-x2, ~560 s: TP A/B + close; quant benches | MTP acceptance; tests
  L="$OUT/logs"; mkdir -p "$L"
  timeout 200 python3 bench/tp.py --batches 1 8 --new 64 --reps 2 --check-prompts 2 --variants default gloo-nccl \
    --out "$OUT/h200x2-llama8b-tp.json" 2>&1 | grep -v Warning | tail -60 > "$L/1-tp.log"
  echo "[$(( $(date +%s) - t0 ))s] tp done" | tee -a "$L/1-tp.log"
  (CUDA_VISIBLE_DEVICES=1 OUT="$L" timeout 240 bash bench/mtp_gpu.sh acceptance > "$L/2-mtp-acceptance.log" 2>&1) &
  CUDA_VISIBLE_DEVICES=0 timeout 125 python3 -m bench.gpt_oss --layers 4 --batches 1 32 --quant mxfp4 \
    --systems modelgen hf_eager --divergence --budget-s 110 --out "$OUT/h200-gpt-oss-20b-mxfp4.json" 2>&1 \
    | grep -v Warning | tail -50 > "$L/2-gpt-oss.log"
  CUDA_VISIBLE_DEVICES=0 timeout 115 python3 -m bench.deepseek --layers 2 --batches 1 32 --quant fp8 \
    --quant-modes keep dequantize --systems hf_eager --divergence --budget-s 100 \
    --out "$OUT/h200-deepseek-v3-fp8.json" 2>&1 | grep -v Warning | tail -50 > "$L/2-deepseek.log"
  wait
  echo "[$(( $(date +%s) - t0 ))s] benches done" | tee -a "$L/2-deepseek.log"
  (CUDA_VISIBLE_DEVICES=1 timeout 115 python3 -m pytest -q -rs -p no:cacheprovider tests/test_pdl.py \
    tests/test_gpu_moe.py tests/test_gpu_norm_linear.py 2>&1 | grep -v Warning | tail -25 > "$L/3-moe-pdl-tests.log") &
  timeout 115 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_parallel_modes.py 2>&1 | tail -25 \
    > "$L/3-parallel-modes-tests.log"
  wait
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/call3.log"
  mv "$L"/*.json "$OUT"/ 2>/dev/null; rm -rf "$L"
  cat "$OUT/call3.log"
elif [ "$phase" = s21a ]; then  # nvidia-h200-x2, ~560 s: all-reduce kernels; TP=2 + profile; EP=2; NCCL mode tests
  L="$OUT/logs"; mkdir -p "$L"
  timeout 90 python3 bench/allreduce.py --out "$OUT/h200x2-allreduce.json" 2>&1 | grep -v Warning | tail -30 \
    > "$L/1-allreduce.log"
  echo "[$(( $(date +%s) - t0 ))s] allreduce done" | tee -a "$L/1-allreduce.log"
  timeout 190 python3 bench/tp.py --batches 1 8 32 --new 64 --reps 2 --check-prompts 2 --profile-steps 32 \
    --out "$OUT/h200x2-llama8b-tp.json" 2>&1 | grep -v Warning | tail -40 > "$L/2-tp.log"
  echo "[$(( $(date +%s) - t0 ))s] tp done" | tee -a "$L/2-tp.log"
  timeout 140 python3 bench/tp.py --size qwen3-30b-a3b-8l --ep 2 --batches 1 8 32 --new 64 --reps 2 \
    --check-prompts 2 --profile-steps 32 --out "$OUT/h200x2-qwen3-moe-ep2.json" 2>&1 | grep -v Warning | tail -40 \
    > "$L/3-ep.log"
  echo "[$(( $(date +%s) - t0 ))s] ep done" | tee -a "$L/3-ep.log"
  timeout 130 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_parallel_modes.py 2>&1 | grep -v Warning \
    | tail -25 > "$L/4-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/4-tests.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s21a.log"; rm -rf "$L"
  cat "$OUT/s21a.log"
elif [ "$phase" = s21b ]; then  # nvidia-h200-x2, ~480 s: GPU engine tests (pipelined decode) | MoE layer modes;
  # TP=2 with pipelined decode A/B + profile; TP/EP NCCL tests
  L="$OUT/logs"; mkdir -p "$L"
  (CUDA_VISIBLE_DEVICES=1 timeout 200 python3 -m pytest -q -rs -n 3 -p no:cacheprovider tests/test_gpu.py \
    tests/test_pipelined_decode.py tests/test_gpu_speculative.py 2>&1 | grep -v Warning | tail -25 > "$L/1-tests.log") &
  CUDA_VISIBLE_DEVICES=0 timeout 95 python3 -m bench.moe_layer --layers 8 --batches 1 --modes pdl pdl_nf pdl_fr \
    pdl_ahead_moe --out "$OUT/h200-moe-layer-s21.json" 2>&1 | grep -v Warning | tail -30 > "$L/1-moe-layer.log"
  CUDA_VISIBLE_DEVICES=0 MODELGEN_GEMV=gemv timeout 95 python3 -m bench.moe_layer --layers 8 --batches 1 --modes pdl \
    pdl_nf --out "$OUT/h200-moe-layer-s21-gemv.json" 2>&1 | grep -v Warning | tail -30 > "$L/1-moe-layer-gemv.log"
  wait
  echo "[$(( $(date +%s) - t0 ))s] tests + moe layer done" | tee -a "$L/1-tests.log"
  timeout 200 python3 bench/tp.py --batches 1 8 32 --new 64 --reps 2 --check-prompts 2 --profile-steps 32 \
    --pipelined-ab --out "$OUT/h200x2-llama8b-tp-pipelined.json" 2>&1 | grep -v Warning | grep "\] " > "$L/2-tp.log"
  echo "[$(( $(date +%s) - t0 ))s] tp done" | tee -a "$L/2-tp.log"
  timeout 100 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_parallel_modes.py -k tensor_parallel 2>&1 \
    | grep -v Warning | tail -15 > "$L/3-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/3-tests.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s21b.log"; rm -rf "$L"
  cat "$OUT/s21b.log"
elif [ "$phase" = s22a ]; then  # nvidia-h200-x2, ~500 s: TP=2 / TP+EP NCCL engine tests (the tiny-MoE rendezvous hang
  # of s21); Llama-3-8B shape bf16 three-way token check (TP=1, TP=2, fp32 TP=1 reference); test_gpu.py count
  L="$OUT/logs"; mkdir -p "$L"
  export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
  timeout -k 10 200 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_parallel_modes.py -k tensor2 2>&1 \
    | grep -v Warning | tail -25 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tp tests done" | tee -a "$L/1-tests.log"
  timeout -k 10 200 python3 bench/tp.py --batches 1 --new 32 --reps 1 --check-prompts 4 --check-new 32 \
    --reference-dtype float32 --out "$OUT/h200x2-llama8b-tp-three-way.json" 2>&1 | grep -v Warning | grep "\] " \
    > "$L/2-tp.log"
  echo "[$(( $(date +%s) - t0 ))s] three-way done" | tee -a "$L/2-tp.log"
  timeout -k 10 170 python3 -m pytest -q -rs -n 4 -p no:cacheprovider tests/test_gpu.py 2>&1 | grep -v Warning \
    | tail -12 > "$L/3-gpu-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] gpu tests done" | tee -a "$L/3-gpu-tests.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s22a.log"; rm -rf "$L"
  cat "$OUT/s22a.log"
elif [ "$phase" = s22b ]; then  # nvidia-h200-x2, ~220 s: the tensor2-qwen3_moe hang with every rank's stacks; NCCL-only leg
  L="$OUT/logs"; mkdir -p "$L"
  export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
  MODELGEN_DUMP_STACKS_AFTER=70 timeout -k 5 110 python3 -m pytest -s -x -q -p no:cacheprovider \
    tests/test_gpu_parallel_modes.py -k "tensor2-qwen3_moe" 2>&1 | grep -v "Warning\|warn" | tail -150 > "$L/1-stacks.log"
  echo "[$(( $(date +%s) - t0 ))s] stacks done" | tee -a "$L/1-stacks.log"
  MODELGEN_CUSTOM_ALLREDUCE=0 timeout -k 5 90 python3 -m pytest -x -q -rs -p no:cacheprovider \
    tests/test_gpu_parallel_modes.py -k "tensor2-qwen3_moe" 2>&1 | grep -v Warning | tail -30 > "$L/2-nccl-only.log"
  echo "[$(( $(date +%s) - t0 ))s] nccl-only done" | tee -a "$L/2-nccl-only.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s22b.log"; rm -rf "$L"
  cat "$OUT/s22b.log"
elif [ "$phase" = s22c ]; then  # nvidia-h200-x2, ~130 s: the tensor2 selection (its 2nd case hangs) with every rank's stacks
  export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
  MODELGEN_DUMP_STACKS_AFTER=40 timeout -k 5 110 python3 -m pytest -s -x -q -p no:cacheprovider \
    tests/test_gpu_parallel_modes.py -k "tensor2-llama or tensor2-qwen3_moe" 2>&1 | grep -v "Warning\|warn\|it/s" \
    | tail -150 > "$OUT/s22c.log"
  cat "$OUT/s22c.log"
elif [ "$phase" = s22d ]; then  # (ran at d7180bd; its A/B leg's switch went with the pairing: bench/NOTES-switches.md)
  # nvidia-h200-x2, ~540 s: norm + GEMV pairing (fuse_norm_linear): MoE 24 layers A/B on
  # GPU 0 while the kernel/engine GPU tests run on GPU 1; then the TP NCCL engine tests; Llama-8B TP=1 vs TP=2
  L="$OUT/logs"; mkdir -p "$L"
  export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
  (CUDA_VISIBLE_DEVICES=1 timeout -k 10 230 python3 -m pytest -q -rs -n 4 -p no:cacheprovider tests/test_gpu_norm_linear.py \
    tests/test_gpu.py tests/test_gpu_moe.py tests/test_pipelined_decode.py 2>&1 | grep -v Warning | tail -15 \
    > "$L/2-gpu-tests.log") &
  CUDA_VISIBLE_DEVICES=0 timeout -k 10 225 python3 -m bench.moe --layers 24 --batches 1 8 32 --systems modelgen \
    --budget-s 215 --out "$OUT/h200-qwen3-30b-a3b-moe-norm-linear.json" 2>&1 \
    | grep -v Warning | grep -v "it/s" | tail -30 > "$L/1-moe.log"
  wait
  echo "[$(( $(date +%s) - t0 ))s] moe + gpu tests done" | tee -a "$L/1-moe.log"
  timeout -k 10 150 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_parallel_modes.py -k tensor2 2>&1 \
    | grep -v Warning | tail -15 > "$L/3-tp-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tp tests done" | tee -a "$L/3-tp-tests.log"
  timeout -k 10 130 python3 bench/tp.py --batches 1 8 32 --new 64 --reps 2 --check-prompts 2 \
    --out "$OUT/h200x2-llama8b-tp-norm-linear.json" 2>&1 | grep -v Warning | grep "\] " > "$L/4-tp.log"
  echo "[$(( $(date +%s) - t0 ))s] tp done" | tee -a "$L/4-tp.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s22d.log"; rm -rf "$L"
  cat "$OUT/s22d.log"
elif [ "$phase" = s22e ]; then  # (ran at eab9c84; its legs' switches went with the changes: bench/NOTES-switches.md)
  # nvidia-h200-x2, ~360 s: router top-k in the norm + GEMV launch, attention's split merge
  # in the decode kernel: MoE 24 layers (GPU 0) while the kernel/engine tests run (GPU 1);
  # then the TP NCCL engine tests
  L="$OUT/logs"; mkdir -p "$L"
  export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
  (CUDA_VISIBLE_DEVICES=1 timeout -k 10 230 python3 -m pytest -q -rs -n 4 -p no:cacheprovider tests/test_gpu_norm_linear.py \
    tests/test_gpu.py tests/test_gpu_moe.py tests/test_gpu_attention_window.py tests/test_gpu_qk_norm_rope.py \
    tests/test_pipelined_decode.py tests/test_pdl.py tests/test_gpu_mla.py 2>&1 | grep -v Warning | tail -15 \
    > "$L/2-gpu-tests.log") &
  CUDA_VISIBLE_DEVICES=0 timeout -k 10 225 python3 -m bench.moe --layers 24 --batches 1 8 32 --systems modelgen \
    --budget-s 215 \
    --out "$OUT/h200-qwen3-30b-a3b-moe-fused-launches.json" 2>&1 | grep -v Warning | grep -v "it/s" | tail -30 \
    > "$L/1-moe.log"
  wait
  echo "[$(( $(date +%s) - t0 ))s] moe + gpu tests done" | tee -a "$L/1-moe.log"
  timeout -k 10 120 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_parallel_modes.py -k tensor2 2>&1 \
    | grep -v Warning | tail -8 > "$L/3-tp-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tp tests done" | tee -a "$L/3-tp-tests.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s22e.log"; rm -rf "$L"
  cat "$OUT/s22e.log"
elif [ "$phase" = s22f ]; then  # (ran at 5b0ddf8: settings pdl_nfr / pdl_nf_nofold since removed)
  # nvidia-h200, ~280 s: the norm + router kernel's compile error in full; one MoE layer's
  # kernels with the norm pairing, the router top-k fused, attention's merge in or out of the decode kernel
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 100 python3 -m pytest -x -q -p no:cacheprovider tests/test_gpu_norm_linear.py 2>&1 | grep -v Warning \
    | grep -B3 -A12 "Error\|error:\|passed\|failed" | tail -70 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  timeout -k 10 170 python3 -m bench.moe_layer --layers 8 --batches 1 8 --modes pdl pdl_nf pdl_nf_nofold pdl_nfr \
    --budget-s 150 --out "$OUT/h200-moe-layer-s22.json" 2>&1 | grep -v Warning | tail -40 > "$L/2-moe-layer.log"
  echo "[$(( $(date +%s) - t0 ))s] moe layer done" | tee -a "$L/2-moe-layer.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s22f.log"; rm -rf "$L"
  cat "$OUT/s22f.log"
elif [ "$phase" = s22g ]; then  # (ran at 83ac625: settings pdl_nfr / pdl_nf_nofold since removed)
  # nvidia-h200, ~240 s: which GPU tests failed in s22e (-n 4); the MoE layer settings again,
  # in another order (run-to-run spread)
  L="$OUT/logs"; mkdir -p "$L"
  timeout -k 10 150 python3 -m pytest -q -rf -n 4 -p no:cacheprovider tests/test_gpu_norm_linear.py tests/test_gpu.py \
    tests/test_gpu_moe.py tests/test_gpu_attention_window.py tests/test_gpu_qk_norm_rope.py tests/test_pipelined_decode.py \
    tests/test_pdl.py tests/test_gpu_mla.py 2>&1 | grep -v Warning | grep "FAILED\|passed\|failed\|Error:" | tail -12 \
    > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  timeout -k 10 120 python3 -m bench.moe_layer --layers 8 --batches 1 --modes pdl_nf_nofold pdl_nfr pdl pdl_nf \
    --budget-s 100 --out "$OUT/h200-moe-layer-s22-repeat.json" 2>&1 | grep -v Warning | tail -16 > "$L/2-moe-layer.log"
  echo "[$(( $(date +%s) - t0 ))s] moe layer done" | tee -a "$L/2-moe-layer.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s22g.log"; rm -rf "$L"
  cat "$OUT/s22g.log"
elif [ "$phase" = s21c ]; then  # nvidia-h200-x2, ~500 s: fused all-reduce + norm kernel tests and timings; TP=2 A/B
  # (fused vs unfused norm, pipelined decode on); TP/EP NCCL engine tests
  L="$OUT/logs"; mkdir -p "$L"
  export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
  timeout -k 10 150 python3 -m pytest -q -rs -x -p no:cacheprovider tests/test_gpu_allreduce_norm.py \
    tests/test_fused_allreduce_norm.py 2>&1 | grep -v Warning | tail -25 > "$L/1-tests.log"
  ok=$?; grep -q " passed" "$L/1-tests.log" && ! grep -q "failed\|error" "$L/1-tests.log" && ok=1 || ok=0
  echo "[$(( $(date +%s) - t0 ))s] fused kernel tests done (ok=$ok)" | tee -a "$L/1-tests.log"
  timeout -k 10 80 python3 bench/allreduce.py --out "$OUT/h200x2-allreduce-fused.json" 2>&1 | grep -v Warning \
    | tail -20 > "$L/2-allreduce.log"
  echo "[$(( $(date +%s) - t0 ))s] allreduce done" | tee -a "$L/2-allreduce.log"
  if [ "$ok" = 1 ]; then V="default unfused-norm"; else export MODELGEN_FUSED_ALLREDUCE_NORM=0; V=default; fi
  timeout -k 10 190 python3 bench/tp.py --batches 1 8 32 --new 64 --reps 2 --check-prompts 2 --variants $V \
    --out "$OUT/h200x2-llama8b-tp-fused.json" 2>&1 | grep -v Warning | grep "\] " > "$L/3-tp.log"
  echo "[$(( $(date +%s) - t0 ))s] tp done" | tee -a "$L/3-tp.log"
  timeout -k 10 110 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_parallel_modes.py -k tensor2 2>&1 \
    | grep -v Warning | tail -15 > "$L/4-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/4-tests.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s21c.log"; rm -rf "$L"
  cat "$OUT/s21c.log"
elif [ "$phase" = s21d ]; then  # nvidia-h200-x2, ~560 s: MoE 24 layers end to end (pipelined A/B); TP/EP NCCL engine
  # tests (Triton one-shot all-reduce by default); all-reduce timings (rank identity per kernel); EP=2 leg
  L="$OUT/logs"; mkdir -p "$L"
  export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
  CUDA_VISIBLE_DEVICES=0 timeout -k 10 185 python3 -m bench.moe --layers 24 --batches 1 8 32 --systems modelgen \
    --env-legs MODELGEN_PIPELINED_DECODE=0 --budget-s 175 --out "$OUT/h200-qwen3-30b-a3b-moe-pipelined.json" 2>&1 \
    | grep -v Warning | grep -v "it/s" | tail -30 > "$L/1-moe.log"
  echo "[$(( $(date +%s) - t0 ))s] moe done" | tee -a "$L/1-moe.log"
  timeout -k 10 170 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_parallel_modes.py -k tensor2 2>&1 \
    | grep -v Warning | tail -15 > "$L/2-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/2-tests.log"
  timeout -k 10 50 python3 bench/allreduce.py --out "$OUT/h200x2-allreduce-fused.json" 2>&1 | grep -v Warning \
    | tail -8 > "$L/3-allreduce.log"
  echo "[$(( $(date +%s) - t0 ))s] allreduce done" | tee -a "$L/3-allreduce.log"
  timeout -k 10 100 python3 bench/tp.py --size qwen3-30b-a3b-8l --ep 2 --batches 1 8 32 --new 64 --reps 2 \
    --check-prompts 2 --out "$OUT/h200x2-qwen3-moe-ep2-triton-ar.json" 2>&1 | grep -v Warning | grep "\] " > "$L/4-ep.log"
  echo "[$(( $(date +%s) - t0 ))s] ep done" | tee -a "$L/4-ep.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s21d.log"; rm -rf "$L"
  cat "$OUT/s21d.log"
elif [ "$phase" = s20a ]; then  # nvidia-h200, ~520 s: bias/quant/PDL MoE tests; gpt-oss MXFP4 A/B; DeepSeek FP8 keep
  L="$OUT/logs"; mkdir -p "$L"
  timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_moe_bias.py tests/test_fp8_keep.py \
    tests/test_mxfp4_keep.py tests/test_pdl.py 2>&1 | grep -v Warning | tail -25 > "$L/1-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/1-tests.log"
  timeout 190 python3 -m bench.gpt_oss --layers 4 --batches 1 32 --quant mxfp4 --divergence --budget-s 180 \
    --out "$OUT/h200-gpt-oss-20b-mxfp4.json" 2>&1 | grep -v Warning | tail -45 > "$L/2-gpt-oss.log"
  echo "[$(( $(date +%s) - t0 ))s] gpt-oss done" | tee -a "$L/2-gpt-oss.log"
  timeout 180 python3 -m bench.deepseek --layers 2 --batches 1 32 --quant fp8 --quant-modes keep --divergence \
    --budget-s 170 --out "$OUT/h200-deepseek-v3-fp8-keep.json" 2>&1 | grep -v Warning | tail -45 > "$L/3-deepseek.log"
  echo "[$(( $(date +%s) - t0 ))s] deepseek done" | tee -a "$L/3-deepseek.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s20a.log"; rm -rf "$L"
  cat "$OUT/s20a.log"
elif [ "$phase" = s20b ]; then  # nvidia-h200, ~530 s: DeepSeek FP8 dequantize leg; MoE engine PDL A/B (ran with
  # --pdl-levels 1 2; level 2 lost and is gone, so the A/B is now against PDL off); PDL=1 tests
  L="$OUT/logs"; mkdir -p "$L"
  timeout 150 python3 -m bench.deepseek --layers 2 --batches 1 32 --quant fp8 --quant-modes dequantize --systems none \
    --divergence --budget-s 140 --out "$OUT/h200-deepseek-v3-fp8-dequantize.json" 2>&1 | grep -v Warning | tail -30 \
    > "$L/1-deepseek.log"
  echo "[$(( $(date +%s) - t0 ))s] deepseek done" | tee -a "$L/1-deepseek.log"
  timeout 230 python3 -m bench.moe --layers 24 --batches 1 8 32 --systems modelgen --pdl-levels 0 --budget-s 220 \
    --out "$OUT/h200-qwen3-30b-a3b-moe-pdl.json" 2>&1 | grep -v Warning | tail -40 > "$L/2-moe-pdl.log"
  echo "[$(( $(date +%s) - t0 ))s] moe done" | tee -a "$L/2-moe-pdl.log"
  MODELGEN_PDL=1 timeout 140 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_moe.py tests/test_gpu.py \
    -k "engine or graph or gemv or skinny or kernels or against_hf_llama_fp32" 2>&1 | grep -v Warning | tail -15 \
    > "$L/3-tests-pdl1.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done" | tee -a "$L/3-tests-pdl1.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s20b.log"; rm -rf "$L"
  cat "$OUT/s20b.log"
elif [ "$phase" = s20c ]; then  # nvidia-h200, ~400 s: speculative step profile; FP8 GEMV tests + sweep; DeepSeek FP8 A/B
  L="$OUT/logs"; mkdir -p "$L"
  timeout 110 python3 bench/mtp.py --models deepseek --profile --k 1 2 --batches 1 8 --new-tokens 32 \
    --out "$OUT/h200-mtp-deepseek-profile.json" 2>&1 | grep -v "Warning\|USDT" | tail -40 > "$L/1-mtp-profile.log"
  echo "[$(( $(date +%s) - t0 ))s] profile done" | tee -a "$L/1-mtp-profile.log"
  timeout 60 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_fp8.py 2>&1 | grep -v Warning | tail -6 \
    > "$L/2-fp8-tests.log"
  timeout 150 python3 -m bench.deepseek --layers 2 --batches 1 32 --quant fp8 --quant-modes keep dequantize \
    --systems none --divergence --budget-s 140 --out "$OUT/h200-deepseek-v3-fp8-gemv.json" 2>&1 | grep -v Warning \
    | tail -14 > "$L/3-deepseek.log"
  echo "[$(( $(date +%s) - t0 ))s] deepseek done" | tee -a "$L/3-deepseek.log"
  timeout 130 python3 -m bench.fp8_gemm --rows 1 32 --sweep-rows 1 --out "$OUT/h200-fp8-gemm.json" 2>&1 \
    | grep -v Warning | tail -45 > "$L/4-fp8-gemm.log"
  for f in "$L"/*.log; do echo "=== $(basename $f)"; cat "$f"; done > "$OUT/s20c.log"; rm -rf "$L"
  cat "$OUT/s20c.log"
elif [ "$phase" = fp8 ]; then
  timeout 120 python3 -m pytest -q -rs tests/test_gpu_fp8.py -p no:cacheprovider 2>&1 | tail -5 | tee "$OUT/h200-gpu-fp8-tests.log"
  timeout 400 python3 -m bench.fp8_gemm --out "$OUT/h200-fp8-gemm.json" 2>&1 | tee "$OUT/h200-fp8-gemm.log"
elif [ "$phase" = 3 ]; then
  timeout 250 python3 -m bench.qwen3_next --budget-s 235 --out "$OUT/h200-qwen3-next-80b-a3b.json" 2>&1 \
    | grep -v Warning | tee "$OUT/h200-qwen3-next-80b-a3b.log"
  left=$(( 290 - ($(date +%s) - t0) ))
  if [ $left -gt 70 ]; then
    timeout $left python3 -m bench.gpt_oss --no-graphs --budget-s $(( left - 10 )) --out "$OUT/h200-gpt-oss-20b.json" 2>&1 \
      | grep -v Warning | tee "$OUT/h200-gpt-oss-20b.log"
  fi
elif [ "$phase" = x2 ]; then
  (CUDA_VISIBLE_DEVICES=1 timeout 140 python3 -m pytest -q -rs tests/test_gpu_mla.py tests/test_gpu_attention_window.py \
    -p no:cacheprovider 2>&1 | tail -30 > "$OUT/h200-gpu-mla-window-tests.log") &
  CUDA_VISIBLE_DEVICES=0 timeout 145 python3 -m bench.deepseek --quant fp8 --budget-s 130 \
    --out "$OUT/h200-deepseek-v3.json" 2>&1 | grep -v Warning | tee "$OUT/h200-deepseek-v3.log"
  wait
  cat "$OUT/h200-gpu-mla-window-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] deepseek + kernel tests done"
  timeout 175 python3 bench/tp.py --batches 1 8 32 --new 64 --reps 2 --check-prompts 2 \
    --out "$OUT/h200x2-llama8b-tp.json" 2>&1 | grep -v Warning | tee "$OUT/h200x2-llama8b-tp.log"
  echo "[$(( $(date +%s) - t0 ))s] tp done"
  left=$(( 440 - ($(date +%s) - t0) ))
  if [ $left -gt 60 ]; then
    (CUDA_VISIBLE_DEVICES=1 timeout $left python3 bench/mtp.py --models deepseek --train-steps 200 --k 1 2 \
      --batches 1 8 --new-tokens 64 --out "$OUT/h200-mtp-deepseek.json" > "$OUT/h200-mtp-deepseek.log" 2>&1) &
    CUDA_VISIBLE_DEVICES=0 timeout $left python3 -m bench.gpt_oss --budget-s $(( left - 10 )) \
      --out "$OUT/h200-gpt-oss-20b.json" 2>&1 | grep -v Warning | tee "$OUT/h200-gpt-oss-20b.log"
    wait
    tail -25 "$OUT/h200-mtp-deepseek.log"
  fi
elif [ "$phase" = 1 ]; then
  timeout 150 python3 -m pytest -q -rs tests/test_gpu_gdn.py -p no:cacheprovider 2>&1 | tee "$OUT/h200-gpu-gdn-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] gdn tests done"
  timeout 260 python3 -m bench.qwen3_next --budget-s 220 --out "$OUT/h200-qwen3-next-80b-a3b.json" 2>&1 \
    | grep -v Warning | tee "$OUT/h200-qwen3-next-80b-a3b.log"
  echo "[$(( $(date +%s) - t0 ))s] qwen3-next bench done"
  timeout 120 python3 -m pytest -q -n 4 tests/test_gpu.py tests/test_gpu_moe.py -p no:cacheprovider 2>&1 \
    | tail -30 | tee "$OUT/h200-gpu-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] gpu tests done"
  left=$(( 545 - ($(date +%s) - t0) ))
  if [ $left -gt 60 ]; then
    timeout $left python3 -m bench.gpt_oss --quant mxfp4 --budget-s $(( left - 15 )) --out "$OUT/h200-gpt-oss-20b.json" 2>&1 \
      | grep -v Warning | tee "$OUT/h200-gpt-oss-20b.log"
  fi
else
  timeout 200 python3 -m pytest -q -rs -n 4 tests/test_gpu_mla.py tests/test_gpu_attention_window.py tests/test_gpu.py \
    tests/test_gpu_moe.py -p no:cacheprovider 2>&1 | tail -40 | tee "$OUT/h200-gpu-tests.log"
  echo "[$(( $(date +%s) - t0 ))s] tests done"
  timeout 220 python3 -m bench.deepseek --quant fp8 --budget-s 200 --out "$OUT/h200-deepseek-v3.json" 2>&1 \
    | grep -v Warning | tee "$OUT/h200-deepseek-v3.log"
  left=$(( 545 - ($(date +%s) - t0) ))
  if [ $left -gt 70 ]; then
    timeout $left python3 -m bench.gpt_oss --quant mxfp4 --budget-s $(( left - 10 )) --out "$OUT/h200-gpt-oss-20b.json" \
      2>&1 | grep -v Warning | tee "$OUT/h200-gpt-oss-20b.log"
  fi
fi
echo "[$(( $(date +%s) - t0 ))s] session phase $phase done"
