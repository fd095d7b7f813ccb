#!/usr/bin/env bash
# The quality cost of the packed product's int8 activations (docs/design.md §6.11), separated from the
# cost of the weights' quantization: for each type, the model quantized (int8 activations, the
# definition) and the same quantized weights re-typed to f32 (float activations), each scored by
# `specgen perplexity --kl-base` against the f32 model, and the first against the second.
# Usage: tools/packed_quality.sh MODEL TEXT [CTX] [TYPES]   (runs on the CPU; prints a markdown table)
# e.g.   tools/packed_quality.sh models/tiny-target models/heldout.txt 128
set -euo pipefail
model=${1:?model (HF directory or GGUF)}
text=${2:?text file}
ctx=${3:-128}
types=${4:-q8_0 q6_k q5_k_m q4_k_m q4_0}
specgen=${SPECGEN:-$(cd "$(dirname "$0")/.." && pwd)/build/engine/cli/specgen}
[ -x "$specgen" ] || { echo "packed_quality: no specgen at $specgen (set SPECGEN)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# convert's notes (rows kept in a smaller-block type) go to a log, shown only when it fails.
convert() { "$specgen" convert "$@" > "$work/convert.log" 2>&1 || { cat "$work/convert.log" >&2; exit 1; }; }
ppl() { "$specgen" perplexity -m "$1" -f "$text" -c "$ctx" "${@:2}" 2>&1; }
field() { sed -n "s/^$1 *: *\([-0-9.e]*\).*/\1/p" | head -1; }
convert "$model" "$work/f32.gguf" --type f32
base_ppl=$(ppl "$work/f32.gguf" --save-logits "$work/f32.sglp" | sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p')
echo "f32 PPL $base_ppl ($model, $text, -c $ctx)"
echo
echo "| type | PPL int8 acts | PPL float acts | KL weights (float acts vs f32) | KL int8 acts vs float acts | KL int8 acts vs f32 | same top token (int8 vs float) |"
echo "|---|---|---|---|---|---|---|"
for t in $types; do
  convert "$model" "$work/$t.gguf" --type "$t"
  convert "$work/$t.gguf" "$work/$t-f32.gguf" --type f32
  deq=$(ppl "$work/$t-f32.gguf" --kl-base "$work/f32.sglp" --save-logits "$work/$t-f32.sglp")
  vs_f32=$(ppl "$work/$t.gguf" --kl-base "$work/f32.sglp")
  vs_deq=$(ppl "$work/$t.gguf" --kl-base "$work/$t-f32.sglp")
  echo "| $t | $(field 'Mean PPL(Q)' <<< "$vs_f32") | $(field 'Mean PPL(Q)' <<< "$deq") | $(field 'Mean    KLD' <<< "$deq") | $(
    field 'Mean    KLD' <<< "$vs_deq") | $(field 'Mean    KLD' <<< "$vs_f32") | $(field 'Same top p' <<< "$vs_deq") |"
done
