#!/usr/bin/env bash
# A/B of benchmark builds in ONE device call (identical code measures 2-3% apart between device sessions,
# so only runs side by side can judge a small change). Here: build each variant, strip its
# e2e_gpu_bench and pack it as .device/<name>.tar.xz (tar cJf .device/v0.tar.xz -C DIR bin/e2e_gpu_bench,
# DIR/bin holding the binary; keep the carry under 64 MiB: pack nothing else). There (carry [".device"]):
#   FILTER='BM_DecodeTimeline|BM_DraftDecode/ctx:32/' bash tools/ab_bench.sh
# runs every variant twice, alternating, and prints us a token and the per-kind timeline (pre, gap,
# stage, rest, tail; bench/e2e_gpu) for each. BENCH=kernels_bench compares kernels_bench builds instead
# (each variant's bin/ then carries kernels_bench; e.g. FILTER='BM_Gemv/'). JSON results go to $OUT. A variant's bin/ may also carry
# test binaries to run first (only e2e_gpu_bench is benchmarked); bin.tar.xz (tools/pack_gpu_check.sh's
# pack, which gpu_check.sh uses) is not a variant.
set -u
export SPECGEN_SOURCE_DIR=$PWD
source .device/env.sh
OUT=${OUT:-/tmp/ab-bench}; mkdir -p "$OUT"
variants=()
for t in .device/*.tar.xz; do
  [ "$(basename "$t")" = bin.tar.xz ] && continue
  v=$(basename "$t" .tar.xz)
  variants+=("$v")
  mkdir -p ".device/$v" && tar xJf "$t" -C ".device/$v"
done
F=${FILTER:-BM_DecodeTimeline}
BENCH=${BENCH:-e2e_gpu_bench}
for round in 1 2; do
  for v in "${variants[@]}"; do
    timeout 150 ".device/$v/bin/$BENCH" --benchmark_filter="$F" --benchmark_format=json 2>/dev/null \
      > "$OUT/$v$round.json"
    python3 tools/summarize_bench.py "$OUT/$v$round.json" "$v$round"
  done
done
