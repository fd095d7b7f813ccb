#!/usr/bin/env bash
# One-off driver of this session's last GPU call (not committed).
set -u
O=$OUT
timeout 240 bash tools/gpu_check.sh tests > $O/tests_summary.txt 2>&1
timeout 90 kernels_bench --benchmark_filter='PackedGemv|PackedRoutedExperts' --benchmark_min_time=0.05 \
  --benchmark_counters_tabular=true --benchmark_out=$O/packed.json --benchmark_out_format=json > $O/packed_bench.txt 2>&1
BUDGETS="none 8GiB" TOKENS=256 timeout 120 bash tools/gpu_offload_bench.sh > $O/offload.txt 2>&1
timeout 120 streamed_bench --benchmark_filter='BM_StreamedVerifyPass/budget_gib:8/n:(1|4|16)/' --benchmark_counters_tabular=true \
  --benchmark_out=$O/bench_streamed.json --benchmark_out_format=json > $O/bench_streamed.log 2>&1
m=models/tiny-target; t=models/heldout.txt; d=/tmp/ppl; mkdir -p $d
{
  timeout 30 specgen perplexity -m $m -f $t --device cuda --save-logits $d/base.sglp 2>&1 | tail -3
  for ty in q8_0 q6_k q4_k_m; do
    timeout 60 specgen convert $m $d/t-$ty.gguf --type $ty > /dev/null 2>&1
    echo "== $ty"; timeout 30 specgen perplexity -m $d/t-$ty.gguf -f $t --device cuda --kl-base $d/base.sglp 2>&1 | tail -8
  done
} > $O/ppl.txt 2>&1
sed -n '/SUMMARY/,$p' $O/tests_summary.txt | cut -c1-250 | head -40
grep -E "^BM_Packed" $O/packed_bench.txt | sed -E 's/ +/ /g' | awk '{print $1, $2, $3, $8, $9, $10}' | head -70
tail -4 $O/offload.txt
grep -E "^BM_|ERROR" $O/bench_streamed.log | sed -E 's/ +/ /g' | cut -c1-230
grep -vE "^\s*$" $O/ppl.txt | cut -c1-160 | tail -40
