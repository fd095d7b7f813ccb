#!/bin/bash
# Runs the tools on the GPU machine and packs what they make into $OUT/out.tgz.
# Usage, from the repository root there: tools/device_run.sh [full|smoke|fixtures|train]
#   full: fixtures + tiny pair (~8 min); smoke: fixtures + a 20-second pair run that checks the
#   pipeline end to end; fixtures / train: one of the two.
set -o pipefail
mode=${1:-full}
OUT=${OUT:-/tmp/specgen-tools-out}
mkdir -p "$OUT"
cd "$(dirname "$0")" || exit 1
export PYTHONUNBUFFERED=1
rc=0
if [ "$mode" != train ]; then
  timeout 240 python3 make_fixtures.py --out ../tests/data 2>&1 | tee "$OUT/fixtures.log" || rc=1
fi
targs=""
[ "$mode" = smoke ] && targs="--target-seconds 12 --draft-seconds 6 --prompts 4 --max-k 2 --new-tokens 16"
if [ "$mode" != fixtures ]; then
  timeout 520 python3 train_tiny_pair.py --out ../models $targs 2>&1 | tee "$OUT/train.log" || rc=1
fi
cd .. && tar czf "$OUT/out.tgz" tests/data models
exit $rc
