# Shared by scripts/demo and scripts/test (sourced, not run): installs the Debian packages that are
# missing, then configures and builds specgen in $SPECGEN_BUILD_DIR (default build/).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SPECGEN_BUILD_DIR:-$top/build}
packages=(build-essential cmake pkg-config libabsl-dev libeigen3-dev libgtest-dev libgmock-dev
          libbenchmark-dev nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libedit-dev libcpp-httplib-dev
          python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing missing Debian packages: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# nvcc is often outside PATH on Debian (CUDA's own packages put it in /usr/local/cuda/bin).
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
jobs=${SPECGEN_JOBS:-$(nproc)}
mkdir -p "$build"
log="$build/build.log"
echo "building specgen in $build (log: $log)"
# Quiet on success; on failure the end of the log (the compiler's errors) goes to the terminal.
if ! { cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=${SPECGEN_BUILD_TYPE:-RelWithDebInfo} \
         ${SPECGEN_CMAKE_ARGS:-} && cmake --build "$build" -j "$jobs"; } >"$log" 2>&1; then
  tail -n 60 "$log"
  echo "build failed: see $log" >&2
  exit 1
fi
