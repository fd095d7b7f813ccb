#!/usr/bin/env bash
# Issue 33 / 34 figures on the GPU machine: a large synthetic MoE target with packed weights, resident
# and with its experts streamed under VRAM budgets, alone and with a draft; greedy, so every run of a
# target must print the same ids whatever the budget or the draft (streamed = resident, speculative =
# target-only). One line of --stats json a run; a table last. Run there after tools/pack_gpu_check.sh:
#   tar xJf .device/bin.tar.xz -C .device && source .device/env.sh && OUT=$OUT bash tools/gpu_offload_bench.sh
# TARGET, DRAFT, BUDGETS, TOKENS and KS override the defaults below; FIXED=1 drafts exactly k a pass. These runs route by the model's own
# router; the routing regimes (uniform, locality: benchmarks only, never a generate flag) run in
# streamed_bench's BM_StreamedGeneration (tools/gpu_check.sh stream with STREAM_FILTER).
set -u
OUT_FINAL=${OUT:-/tmp/gpu-offload}; mkdir -p "$OUT_FINAL"
target=${TARGET:-synth:qwen3-30b-a3b:q4_k_m}
draft=${DRAFT:-synth:qwen3-0.6b:q8_0}
budgets=${BUDGETS:-"none 16GiB 8GiB"}
tokens=${TOKENS:-128}
ks=${KS:-"0 4"}  # draft lengths (0: the target alone)
fixed=(); [ -n "${FIXED:-}" ] && fixed=(--draft-fixed)  # FIXED=1: draft exactly k every pass
ids=$(seq -s, 11 42)  # a 32-token prompt
log="$OUT_FINAL/offload_runs.txt"; : > "$log"
for budget in $budgets; do
  for k in $ks; do
    name="budget=$budget k=$k"
    extra=(); [ "$budget" != none ] && extra=(--vram-budget "$budget")
    start=$(date +%s%N)
    timeout 280 specgen generate -m "$target" -md "$draft" --draft-max "$k" "${fixed[@]}" --prompt-ids "$ids" -n "$tokens" \
      --temp 0 --ignore-eos --print-ids --stats json "${extra[@]}" > "$OUT_FINAL/run.out" 2> "$OUT_FINAL/run.err"
    rc=$?
    echo "### $name rc=$rc wall_ms=$(( ($(date +%s%N) - start) / 1000000 ))" >> "$log"
    grep -v '^{' "$OUT_FINAL/run.out" | md5sum | sed 's/^/ids_md5 /' >> "$log"
    grep '^{' "$OUT_FINAL/run.out" >> "$log"
    grep -v '^\s*$' "$OUT_FINAL/run.err" | tr '\r' '\n' | grep -v '%' | tail -4 >> "$log"
  done
done
python3 - "$log" <<'PY'
import json, sys
rows, name, md5 = [], None, None
for line in open(sys.argv[1]):
    if line.startswith("### "): name = line[4:].strip()
    elif line.startswith("ids_md5 "): md5 = line.split()[1][:8]
    elif line.startswith("{"):
        s = json.loads(line)
        rows.append((name, md5, s))
print(f"{'run':44} {'ids':8} {'tok/s':>8} {'accept':>7} {'MiB/tok':>8} {'hit':>6} {'distinct':>8}")
for name, md5, s in rows:
    print(f"{name:44} {md5:8} {s.get('tokens_per_second', 0):8.1f} {s.get('acceptance_rate') or 0:7.3f} "
          f"{(s.get('h2d_bytes_per_token') or 0) / 2**20:8.2f} {s.get('expert_cache_hit_rate') or 0:6.3f} "
          f"{s.get('mean_distinct_experts') or 0:8.2f}")
PY
