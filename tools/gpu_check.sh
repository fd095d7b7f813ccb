#!/usr/bin/env bash
# Everything the GPU machine is for, in one call: every gpu-labelled test, the CLI on the GPU against
# the CPU reference, and the GPU benchmarks (kernels and end to end). Logs go under $OUT; a short
# table is printed last. Build here with `cmake --preset h200 && cmake --build build-h200`, pack with
# tools/pack_gpu_check.sh, then run there (repository root as cwd, carry [".device"]):
#   tar xJf .device/bin.tar.xz -C .device && source .device/env.sh && OUT=$OUT bash tools/gpu_check.sh [tests|bench|all|stream|profile|products]
set -u
what=${1:-all}
export SPECGEN_SOURCE_DIR=$PWD
# Logs are written to a work folder and packed into $OUT/gpu-check-logs.tgz at the end: the device
# tool brings back at most 8 files, so they travel as one.
OUT_FINAL=${OUT:-/tmp/gpu-check}; mkdir -p "$OUT_FINAL"
OUT=$(mktemp -d /tmp/gpu-check-logs.XXXXXX)
trap 'tar czf "$OUT_FINAL/gpu-check-logs.tgz" -C "$OUT" . 2>/dev/null' EXIT
rc="$OUT/rc.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$rc" 2>&1
if [ "$what" = stream ]; then
  # Only the streamed benchmarks (synth:qwen3-30b-a3b, every expert in host memory; BM_StreamedDensePass:
  # every dense FFN through the layer ring). STREAM_FILTER picks a share of them (a --benchmark_filter
  # regex: all of them take longer than one call may).
  context="--benchmark_context=commit=$(cat .device/commit 2>/dev/null || echo unknown),gpu=$(
    nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ',' ' ')"
  timeout "${STREAM_TIMEOUT:-580}" streamed_bench --benchmark_counters_tabular=true "$context" \
    --benchmark_filter="${STREAM_FILTER:-BM_StreamedVerifyPass}" --benchmark_out="$OUT/bench_streamed.json" \
    --benchmark_out_format=json 2>&1 | tee "$OUT/bench_streamed.log"
  echo "bench_streamed ${PIPESTATUS[0]}" >> "$rc"
  cp "$OUT/bench_streamed.json" "$OUT/bench_streamed.log" "$OUT_FINAL/" 2>/dev/null
  exit 0
fi
if [ "$what" = products ]; then
  # The packed products' two layouts side by side (the same bits, kernels/packed.cuh): kernels_bench's
  # BM_PackedGemv / BM_PackedRoutedExperts per layout, BM_ResidentVerifyPass under the default choice
  # and under tiles, and ncu's stall reasons of the row kernels.
  context="--benchmark_context=commit=$(cat .device/commit 2>/dev/null || echo unknown),gpu=$(
    nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ',' ' ')"
  timeout 150 kernels_bench --benchmark_min_time=0.05 --benchmark_counters_tabular=true "$context" \
    --benchmark_filter='BM_PackedGemv/[0-9]+/[0-9]+/[0-9]+/[0-9]+/(1|2)/|BM_PackedRoutedExperts|BM_PackedGemv/0/(1|4|16)/(768|2048|4096)/' \
    --benchmark_out="$OUT/bench_products.json" --benchmark_out_format=json 2>&1 | tee "$OUT/bench_products.log" \
    | grep -E '^BM_|ERROR' | sed -E 's/ +/ /g' | cut -c1-170
  timeout "${STREAM_TIMEOUT:-240}" streamed_bench --benchmark_counters_tabular=true "$context" \
    --benchmark_filter=BM_ResidentVerifyPass --benchmark_out="$OUT/bench_resident_pass.json" \
    --benchmark_out_format=json 2>&1 | tee "$OUT/bench_resident_pass.log" | grep -E '^BM_|ERROR' | sed -E 's/ +/ /g'
  timeout 200 ncu --clock-control none --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis \
    --kernel-name regex:'Rows(GateUp|Down)Kernel|PackedRowsKernel' --launch-skip 20 --launch-count 4 \
    kernels_bench --benchmark_filter='BM_PackedRoutedExperts/(8|64)/1|BM_PackedGemv/0/1/5120/2048/1' \
    > "$OUT/ncu_rows.txt" 2>&1
  grep -E 'Kernel|Duration|Stall|Warp Cycles|Occupancy|Memory Throughput|Registers|L1/TEX Hit' "$OUT/ncu_rows.txt" | head -60
  cp "$OUT"/bench_products.json "$OUT"/bench_resident_pass.json "$OUT"/ncu_rows.txt "$OUT_FINAL/" 2>/dev/null
  exit 0
fi
if [ "$what" = profile ]; then
  # One resident verification pass of n = 1 and one of n = 16 (synth:qwen3-30b-a3b q4_k_m) under ncu,
  # each kernel's time, summed by kernel (tools/ncu_pass_summary.py): where a pass goes.
  SPECGEN_PROFILE_PASS=1 timeout "${PROFILE_TIMEOUT:-300}" ncu --clock-control none --profile-from-start off \
    --metrics gpu__time_duration.sum --print-units base --csv streamed_bench \
    --benchmark_filter='BM_ResidentVerifyPass/n:(1|16)/layout:0/' > "$OUT/ncu_pass.csv" 2> "$OUT/ncu_pass.err"
  echo "ncu_pass $?" >> "$rc"
  python3 tools/ncu_pass_summary.py "$OUT/ncu_pass.csv" --names "n=1,n=16" | tee "$OUT/ncu_pass.txt"
  cp "$OUT/ncu_pass.txt" "$OUT_FINAL/" 2>/dev/null
  exit 0
fi
gpu_tests="kernels_test cuda_backend_ops_test cuda_backend_packed_test cuda_graph_test cuda_model_logits_test streamed_experts_test cuda_general_experts_test streamed_host_split_gpu_test
           speculative_gpu_test graphed_draft_test graphed_target_pass_test acceptance_gpu_stats_test fixture_pairs_gpu_test routing_override_gpu_test streamed_layers_test offload_run_gpu_test scripted_draft_gpu_test host_expert_gpu_test"

if [ "$what" != bench ]; then
  for t in $gpu_tests; do  # each test takes a small arena, so they share the GPU
    ( timeout 200 "$t" > "$OUT/$t.log" 2>&1; echo "$t $?" >> "$rc" ) &
  done
  wait
  # The CLI: the GPU-resident loop against the CPU reference on the bundled pair (greedy), and logits.
  # stderr (the load lines, which name the device) goes beside the text, which is what is compared.
  prompt=$'def read_file(path):\n    """Return the contents of path."""\n'
  for dev in cuda cpu; do
    timeout 60 specgen generate -m models/tiny-target -md models/tiny-draft -p "$prompt" -n 64 --temp 0 \
      --device "$dev" --stats json > "$OUT/generate_$dev.txt" 2> "$OUT/generate_$dev.err"
    echo "generate_$dev $?" >> "$rc"
  done
  # --gemv-order fma (the order the default, auto, does not take on the GPU): speculative (k = 4) and
  # target-only (--draft-max 0) greedy give the same text.
  for k in 4 0; do
    timeout 60 specgen generate -m models/tiny-target -md models/tiny-draft -p "$prompt" -n 64 --temp 0 \
      --device cuda --gemv-order fma --draft-max "$k" --stats json > "$OUT/generate_fma_k$k.txt" \
      2> "$OUT/generate_fma_k$k.err"
    echo "generate_fma_k$k $?" >> "$rc"
  done
  timeout 60 specgen logits -m tests/data/models/llama-gqa --prompt-ids 1,2,3,4,5,6,7,8 --device cuda \
    > "$OUT/logits_cuda.txt" 2>&1
  timeout 60 specgen logits -m tests/data/models/llama-gqa --prompt-ids 1,2,3,4,5,6,7,8 --device cpu \
    > "$OUT/logits_cpu.txt" 2>&1
fi
if [ "$what" != tests ]; then
  # The commit (written by pack_gpu_check.sh) and the GPU go into the JSON's context, from where
  # summarize_bench.py heads bench/RESULTS.md with them.
  context="--benchmark_context=commit=$(cat .device/commit 2>/dev/null || echo unknown),gpu=$(
    nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ',' ' ')"
  timeout 320 e2e_gpu_bench --benchmark_counters_tabular=true --benchmark_out="$OUT/bench_e2e.json" \
    --benchmark_out_format=json "$context" > "$OUT/bench_e2e.log" 2>&1
  echo "bench_e2e $?" >> "$rc"
  timeout 120 kernels_bench --benchmark_min_time=0.05 --benchmark_counters_tabular=true \
    --benchmark_filter='Gemv|RoutedExperts|Attention|ProcessAndSample|GreedyDraftDraw|VerifySampling|Acceptance' \
    --benchmark_out="$OUT/bench_kernels.json" --benchmark_out_format=json "$context" \
    > "$OUT/bench_kernels.log" 2>&1
  echo "bench_kernels $?" >> "$rc"
  # bench/RESULTS.md regenerated from this run (also inside the logs tarball with the JSON it came from).
  # The streamed pass's JSON joins them when `stream` ran before in the same call ($OUT_FINAL keeps it).
  streamed_json=$(ls "$OUT_FINAL/bench_streamed.json" 2>/dev/null)
  python3 tools/summarize_bench.py "$OUT/bench_e2e.json" "$OUT/bench_kernels.json" $streamed_json > "$OUT/RESULTS.md" \
    && cp "$OUT/RESULTS.md" "$OUT_FINAL/RESULTS.md"
  # The bundled pair's acceptance through the CLI with the CPU benchmark's settings, k = 4, on both
  # devices: coupled must agree to the token, rejection within sampling noise.
  for dev in cuda cpu; do
    timeout 200 python3 tools/acceptance_check.py "$(command -v specgen)" "$dev" 4 > "$OUT/acceptance_$dev.txt" 2>&1
    echo "acceptance_$dev $?" >> "$rc"
  done
fi

echo "==================== SUMMARY ===================="
head -1 "$rc"
for t in $gpu_tests; do
  [ -f "$OUT/$t.log" ] || continue
  printf '%-28s rc=%-3s %s\n' "$t" "$(awk -v t=$t '$1==t{print $2}' "$rc")" \
    "$(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/$t.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/$t.log" | sort -u | head -10
done
for t in $gpu_tests; do [ -f "$OUT/$t.log" ] && grep -B2 -A6 -E 'Failure$' "$OUT/$t.log" | head -24; done
if [ -f "$OUT/generate_cuda.txt" ]; then
  echo "--- generate (greedy, bundled pair): rc $(awk '$1=="generate_cuda"{print $2}' "$rc") cuda, $(awk '$1=="generate_cpu"{print $2}' "$rc") cpu"
  if diff <(grep -v '^{' "$OUT/generate_cuda.txt") <(grep -v '^{' "$OUT/generate_cpu.txt") > /dev/null; then
    echo "same text on cuda and cpu"
  else
    echo "text differs between cuda and cpu (see generate_*.txt)"
  fi
  grep -h '^{' "$OUT/generate_cuda.txt" | cut -c1-400
  echo "--- generate --gemv-order fma: rc $(awk '$1=="generate_fma_k4"{print $2}' "$rc") k=4, $(awk '$1=="generate_fma_k0"{print $2}' "$rc") k=0"
  if diff <(grep -v '^{' "$OUT/generate_fma_k4.txt") <(grep -v '^{' "$OUT/generate_fma_k0.txt") > /dev/null; then
    echo "fma order: same text with and without the draft"
  else
    echo "fma order: text differs between k=4 and k=0 (see generate_fma_*.txt)"
  fi
  grep -h 'checksum' "$OUT/logits_cuda.txt" "$OUT/logits_cpu.txt"
fi
if [ -f "$OUT/acceptance_cuda.txt" ]; then
  echo "--- acceptance, bundled pair, T = 0.8, k = 4 (rc $(awk '$1=="acceptance_cuda"{print $2}' "$rc") cuda, $(awk '$1=="acceptance_cpu"{print $2}' "$rc") cpu)"
  cat "$OUT/acceptance_cuda.txt" "$OUT/acceptance_cpu.txt"
  if [ "$(grep coupled "$OUT/acceptance_cuda.txt" | cut -d' ' -f2-)" = "$(grep coupled "$OUT/acceptance_cpu.txt" | cut -d' ' -f2-)" ]; then
    echo "coupled: the same on cuda and cpu"
  else
    echo "coupled: DIFFERS between cuda and cpu"
  fi
fi
for b in bench_e2e bench_kernels; do
  [ -f "$OUT/$b.log" ] || continue
  echo "--- $b (rc $(awk -v b=$b '$1==b{print $2}' "$rc")) ---"
  grep -E 'ERROR' "$OUT/$b.log" | head -5
  if [ -s "$OUT/$b.json" ]; then
    python3 tools/summarize_bench.py --lines "$OUT/$b.json" | cut -c1-240 | tail -60
  else  # no JSON (the bench did not start): its console lines
    grep -E '^BM_|^Benchmark' "$OUT/$b.log" | sed -E 's/ +/ /g' | cut -c1-220 | tail -45
  fi
done
