#!/usr/bin/env bash
# Configures (once) and builds sdrt into ${SDRT_BUILD_DIR:-build}. Extra arguments go to
# the first CMake configure, e.g. scripts/build.sh -DSDRT_WITH_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SDRT_BUILD_DIR:-$root/build}
"$root/scripts/install-deps.sh"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
echo "build.sh: building in $build (a first build takes a few minutes)" >&2
cmake --build "$build" -j"$(nproc)" >/dev/null || cmake --build "$build" -j1
