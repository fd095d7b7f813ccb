#!/usr/bin/env bash
# One GPU call for the graph-captured draft decode: the gpu tests that touch the fused kernels, the
# attention kernels' device length and the speculative loop, then BM_DraftDecode (per path) and the
# bundled-pair generation; logs under $OUT, a short table last. Usage there (repo root as cwd):
#   source .device/env.sh && bash bench/e2e_gpu/graph_device_run.sh
set -u
export SPECGEN_SOURCE_DIR=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/rc.txt" 2>&1
tests="graphed_draft_test speculative_gpu_test kernels_test cuda_backend_ops_test cuda_model_logits_test"
for t in $tests; do
  ( timeout 80 "$t" > "$OUT/$t.log" 2>&1; echo "$t $?" >> "$OUT/rc.txt" ) &
done
wait
timeout 60 e2e_gpu_bench --benchmark_counters_tabular=true > "$OUT/bench.log" 2>&1; echo "bench $?" >> "$OUT/rc.txt"
echo "==================== SUMMARY ===================="
head -1 "$OUT/rc.txt"
for t in $tests; do
  printf '%-26s rc=%s  %s\n' "$t" "$(awk -v t=$t '$1==t{print $2}' $OUT/rc.txt)" "$(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ test' $OUT/$t.log | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/$t.log" | sort -u | head -20
done
echo "--- failures (first lines) ---"
for t in $tests; do grep -B2 -A8 -E 'Failure$' "$OUT/$t.log" | head -30; done
echo "--- printed ---"
grep -hE 'bit-identical|draft path|acceptance|syncs' $OUT/graphed_draft_test.log $OUT/speculative_gpu_test.log | head -20
echo "--- bench (rc $(awk '$1=="bench"{print $2}' $OUT/rc.txt)) ---"; grep -vE '^\*\*\*|^$' "$OUT/bench.log" | tail -22
