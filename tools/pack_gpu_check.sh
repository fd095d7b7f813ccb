#!/usr/bin/env bash
# Packs what tools/gpu_check.sh runs into .device/ small enough to travel (the working tree and carried
# paths together must stay under 64 MiB: each CUDA binary carries its own ~5 MB of kernels, so the
# executables travel as one xz tarball). Usage, here, after `cmake --preset h200 && cmake --build
# build-h200`:   tools/pack_gpu_check.sh [BUILD_DIR]
# then on the GPU machine (carry [".device"]):
#   tar xJf .device/bin.tar.xz -C .device && source .device/env.sh && OUT=$OUT bash tools/gpu_check.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build-h200}
pack=${SPECGEN_DEVICE_PACK:-$top/../shared/tools/device-pack}
"$pack" "$build" > /dev/null
# SPECGEN_PACK_KEEP: only these executables (space-separated), for a quicker pack of a few.
keep=" ${SPECGEN_PACK_KEEP:-specgen specgen_bench e2e_gpu_bench kernels_bench streamed_bench $(sed -n 's/^gpu_tests="\(.*\)/\1/p;s/^ *\([a-z_ ]*\)"$/\1/p' \
  "$top/tools/gpu_check.sh" | tr '\n' ' ')} "
# The commit the binaries were built from, for the benchmarks' JSON context (gpu_check.sh).
{ git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown; } | tr -d '\n' > "$top/.device/commit"
git -C "$top" diff --quiet HEAD 2>/dev/null || echo -n "+changes" >> "$top/.device/commit"
cd "$top/.device"
for f in bin/*; do
  case "$keep" in *" $(basename "$f") "*) ;; *) rm "$f" ;; esac
done
strip bin/* lib/* 2>/dev/null || true
# One xz stream whose dictionary spans every executable (640 MiB; -T1, since threads would cut the
# stream into blocks), so the kernels each one carries are stored about once: ~580 MB of binaries pack
# to ~16 MB (47 MB with xz -9's 64 MiB dictionary). Packing takes minutes and ~7 GB of memory.
tar cf - bin | xz -T1 --lzma2=preset=9,dict=640MiB > bin.tar.xz && rm -rf bin && mkdir bin
echo "packed $(tar tJf bin.tar.xz | grep -c /.) executables, $(du -sh . | cut -f1) in .device"
