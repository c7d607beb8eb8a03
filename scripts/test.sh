#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test with CTest.
# GPU tests (label gpu) skip with a message when no CUDA device is present. When the main
# build has CUDA, a second CPU-only build (SDRT_WITH_CUDA=OFF, in build-cpu/) runs the CPU
# tests too, so both configurations stay green.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SDRT_BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
echo "== tests: $build" >&2
(cd "$build" && ctest --output-on-failure -j"$(nproc)" "$@")
if grep -q '^SDRT_CONFIGURED_WITH_CUDA:INTERNAL=ON' "$build/CMakeCache.txt"; then
  cpu_build=${SDRT_CPU_BUILD_DIR:-$root/build-cpu}
  SDRT_BUILD_DIR=$cpu_build "$root/scripts/build.sh" -DSDRT_WITH_CUDA=OFF
  echo "== tests: $cpu_build (CUDA off)" >&2
  (cd "$cpu_build" && ctest --output-on-failure -j"$(nproc)" -L cpu "$@")
fi
