#!/usr/bin/env bash
# Configures (once) and builds sdrt into ${SDRT_BUILD_DIR:-build}. Extra arguments go to
# the first CMake configure, e.g. scripts/build.sh -DSDRT_WITH_CUDA=OFF. SDRT_BUILD_TARGETS
# (space-separated) builds those targets only, e.g. SDRT_BUILD_TARGETS="sdrt sdrt_cli".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SDRT_BUILD_DIR:-$root/build}
"$root/scripts/install-deps.sh"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
echo "build.sh: building in $build (a first build takes a few minutes)" >&2
targets=()
for target in ${SDRT_BUILD_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}" >/dev/null ||
  cmake --build "$build" -j1 "${targets[@]}"
