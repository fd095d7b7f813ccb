#!/usr/bin/env bash
# A/B of benchmark builds in ONE device call (identical code measures a little differently on each
# fresh device machine, so only runs side by side can judge a small change). Here:
# `tools/ab_prepare.sh REV [REV ...]` builds each revision and packs it as .device/v<i>.tar.xz (bin/
# holding the stripped benchmark and any test binaries asked for; by hand: tar cJf .device/v0.tar.xz
# -C DIR bin). There (carry [".device"]):
#   FILTER='BM_DraftDecode/ctx:32/' bash tools/ab_bench.sh
# first runs each variant's test binaries (every file in its bin/ but the benchmarks and specgen; gtest
# filter $TEST_FILTER, default all), then its benchmark, every variant twice, alternating, printing us a
# token for each.
# BENCH=kernels_bench compares kernels_bench builds instead (e.g. FILTER='BM_Gemv/'). JSON results and
# test logs go to $OUT. bin.tar.xz (tools/pack_gpu_check.sh's pack, which gpu_check.sh uses) is not a
# variant. AB_DIR (default .device) is where ab_prepare.sh put the packs.
set -u
export SPECGEN_SOURCE_DIR=$PWD
source .device/env.sh
OUT=${OUT:-/tmp/ab-bench}; mkdir -p "$OUT"
dir=${AB_DIR:-.device}
variants=()
for t in "$dir"/*.tar.xz; do
  [ "$(basename "$t")" = bin.tar.xz ] && continue
  v=$(basename "$t" .tar.xz)
  variants+=("$v")
  mkdir -p "$dir/$v" && tar xJf "$t" -C "$dir/$v"
done
[ -f "$dir/ab_variants.txt" ] && cat "$dir/ab_variants.txt"
for v in "${variants[@]}"; do
  for t in "$dir/$v/bin/"*; do
    name=$(basename "$t")
    case "$name" in e2e_gpu_bench | kernels_bench | specgen) continue ;; esac
    timeout 150 "$t" --gtest_filter="${TEST_FILTER:-*}" > "$OUT/$v-$name.log" 2>&1
    echo "$v $name rc $? $(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/$v-$name.log" | tr '\n' ' ')"
  done
done
F=${FILTER:-BM_DraftDecode/ctx:32/}
BENCH=${BENCH:-e2e_gpu_bench}
for round in 1 2; do
  for v in "${variants[@]}"; do
    timeout 150 "$dir/$v/bin/$BENCH" --benchmark_filter="$F" --benchmark_format=json 2>/dev/null \
      > "$OUT/$v$round.json"
    python3 tools/summarize_bench.py --lines "$OUT/$v$round.json" "$v$round"
  done
done
