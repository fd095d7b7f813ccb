#!/usr/bin/env bash
# Builds the variants of an A/B here and packs them into .device/ for tools/ab_bench.sh: one variant per
# git revision, each in its own worktree and Release sm_90 build under $AB_WORK (default /tmp/specgen-ab;
# a second run rebuilds only what changed). AB_DIR (default .device; must lie under .device to travel)
# holds the packs, so that two A/Bs (say of e2e_gpu_bench and of kernels_bench) go in one device call.
# Usage, from anywhere in the checkout:
#   tools/ab_prepare.sh REV [REV ...]            e.g. tools/ab_prepare.sh main exp/staged-cpasync
# Variant i (in the order given) becomes .device/v<i>.tar.xz holding bin/$BENCH (default e2e_gpu_bench)
# and the test binaries named in $TESTS (e.g. TESTS="graphed_draft_test kernels_test"), stripped; the
# list goes to .device/ab_variants.txt. Then, with the device tool (carry [".device"]):
#   FILTER='BM_DraftDecode/ctx:32/' TEST_FILTER='*' bash tools/ab_bench.sh
# Device time is what an A/B costs, so everything that can be checked here is checked first: each
# revision must build, and the pack must stay under the 64 MiB a call carries.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
work=${AB_WORK:-/tmp/specgen-ab}
bench=${BENCH:-e2e_gpu_bench}
read -r -a tests <<< "${TESTS:-}"
if [ $# -lt 1 ]; then
  echo "usage: $0 REV [REV ...]   (BENCH=e2e_gpu_bench|kernels_bench, TESTS=\"test binaries\")" >&2
  exit 2
fi
revs=("$@") shas=()
for rev in "${revs[@]}"; do  # every revision checked before anything is built
  sha=$(git -C "$top" rev-parse --verify --quiet "$rev^{commit}") || { echo "no such revision: $rev" >&2; exit 2; }
  shas+=("$sha")
done
command -v nvcc > /dev/null || export PATH=/usr/local/cuda/bin:$PATH
dir=$top/${AB_DIR:-.device}
mkdir -p "$work" "$dir"
rm -f "$dir"/v[0-9]*.tar.xz "$dir/ab_variants.txt"
for i in "${!shas[@]}"; do
  sha=${shas[$i]} src=$work/src$i build=$work/build$i pack=$work/pack$i log=$work/build$i.log
  if git -C "$src" rev-parse --git-dir > /dev/null 2>&1; then
    git -C "$src" checkout -q --detach "$sha"
  else
    rm -rf "$src"
    git -C "$top" worktree prune
    git -C "$top" worktree add -q --detach "$src" "$sha"
  fi
  echo "v$i: building ${revs[$i]} (${sha:0:10}): $bench ${tests[*]} in $build"
  if ! { cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPECGEN_CUDA=ON \
           -DCMAKE_CUDA_ARCHITECTURES=90 && \
         cmake --build "$build" -j "$(nproc)" --target "$bench" "${tests[@]}"; } > "$log" 2>&1; then
    tail -n 30 "$log"
    echo "v$i (${revs[$i]}) did not build: see $log" >&2
    exit 1
  fi
  rm -rf "$pack" && mkdir -p "$pack/bin"
  for name in "$bench" "${tests[@]}"; do
    binary=$(find "$build" -type f -name "$name" -perm -u+x | head -n 1)
    [ -n "$binary" ] || { echo "v$i: no $name in $build" >&2; exit 1; }
    strip -o "$pack/bin/$name" "$binary"
  done
  tar cJf "$dir/v$i.tar.xz" -C "$pack" bin
  echo "v$i ${revs[$i]} ${sha:0:10}" >> "$dir/ab_variants.txt"
done
# ab_bench.sh sources .device/env.sh (the device's library paths): pack it once if it is not there.
if [ ! -f "$top/.device/env.sh" ]; then
  "${SPECGEN_DEVICE_PACK:-$top/../shared/tools/device-pack}" "$work/build0" > /dev/null
  rm -rf "$top/.device/bin" && mkdir -p "$top/.device/bin"
fi
size=$(du -sm "$top/.device" | cut -f1)
cat "$dir/ab_variants.txt"
echo "$size MiB in .device (a call carries at most 64 MiB with the working tree)"
if [ "$size" -ge 60 ]; then
  echo "too large: move .device/bin.tar.xz aside for the A/B, or pack fewer test binaries" >&2
  exit 1
fi
