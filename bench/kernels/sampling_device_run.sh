#!/usr/bin/env bash
# GPU machine run for the sampling kernels (issue 7): the sampling + acceptance gpu tests, the speculative
# gpu tests that use them, and the sampling benchmarks; logs under $OUT, a short table last. Usage there
# (repo root as cwd): source .device/env.sh && bash bench/kernels/sampling_device_run.sh
set -u
export SPECGEN_SOURCE_DIR=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$OUT/rc.txt" 2>&1
timeout 40 kernels_test --gtest_filter='SamplingGpu.*:AcceptanceGpu.*' > "$OUT/tests.log" 2>&1
echo "kernels_test(sampling,acceptance) $?" >> "$OUT/rc.txt"
timeout 100 kernels_bench --benchmark_filter='ProcessAndSample|ProcessOnly|SampleOnly|Acceptance|VerifySampling' \
  --benchmark_min_time=0.1 --benchmark_counters_tabular=true > "$OUT/bench.log" 2>&1
echo "bench $?" >> "$OUT/rc.txt"
for t in acceptance_gpu_stats_test speculative_gpu_test; do
  command -v "$t" > /dev/null || continue
  timeout 15 "$t" > "$OUT/$t.log" 2>&1; echo "$t $?" >> "$OUT/rc.txt"
done
if command -v compute-sanitizer > /dev/null; then
  timeout 20 compute-sanitizer --tool memcheck kernels_test \
    --gtest_filter='SamplingGpu.ProcessLogitsEdgeCasesOnBothPaths' > "$OUT/memcheck.log" 2>&1
  echo "memcheck $?" >> "$OUT/rc.txt"
fi
echo "==================== SUMMARY ===================="
cat "$OUT/rc.txt"
grep -hE '^\[ +(OK|FAILED) +\] [A-Za-z]|^\[ +(PASSED|FAILED) +\] [0-9]' "$OUT"/*test*.log | sort -u | head -40
grep -hE 'Failure$' -A6 "$OUT"/*test*.log | head -40
grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" 2>/dev/null
grep -vE '^\*\*\*|^$|^-+$' "$OUT/bench.log" | grep -E 'BM_|Benchmark' | sed -E 's/ +/ /g' | tail -40
