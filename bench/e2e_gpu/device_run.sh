#!/usr/bin/env bash
# Runs every gpu test of the CUDA backend issue and the e2e benchmarks on the GPU machine, logs under
# $OUT, and prints a short pass/fail + numbers table last. Usage there (repo root as cwd):
#   source .device/env.sh && bash bench/e2e_gpu/device_run.sh
set -u
export SPECGEN_SOURCE_DIR=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader > "$OUT/rc.txt" 2>&1
tests="kernels_test cuda_backend_ops_test cuda_model_logits_test speculative_gpu_test graphed_draft_test acceptance_gpu_stats_test"
for t in $tests; do
  ( timeout 150 "$t" > "$OUT/$t.log" 2>&1; echo "$t $?" >> "$OUT/rc.txt" ) &
done
wait
# The CLI on the GPU, against the CPU reference checksum line.
( timeout 60 specgen logits -m tests/data/models/llama-gqa --prompt-ids 1,2,3,4,5,6,7,8 --device cuda;
  timeout 60 specgen logits -m tests/data/models/llama-gqa --prompt-ids 1,2,3,4,5,6,7,8 --device cpu ) > "$OUT/cli.log" 2>&1
timeout 200 e2e_gpu_bench --benchmark_counters_tabular=true > "$OUT/bench.log" 2>&1; echo "bench $?" >> "$OUT/rc.txt"
echo "==================== SUMMARY ===================="
head -1 "$OUT/rc.txt"
for t in $tests; do
  printf '%-28s rc=%s  %s\n' "$t" "$(awk -v t=$t '$1==t{print $2}' $OUT/rc.txt)" "$(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ test' $OUT/$t.log | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/$t.log" | sort -u | head -20
done
echo "--- failures (first lines) ---"
for t in $tests; do grep -B2 -A6 -E 'Failure$' "$OUT/$t.log" | head -40; done
echo "--- printed numbers ---"
grep -hE 'max \||rms \||acceptance|syncs|k=[0-9]' $OUT/*_test.log | head -60
echo "--- cli ---"; grep -E 'model|checksum|Error|error' "$OUT/cli.log"
echo "--- bench (rc $(awk '$1=="bench"{print $2}' $OUT/rc.txt)) ---"; grep -vE '^\*\*\*|^$' "$OUT/bench.log" | tail -25
