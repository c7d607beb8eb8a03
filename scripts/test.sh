#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test with CTest.
# GPU tests (label gpu) skip with a message when no CUDA device is present. When the main
# build has CUDA, a second CPU-only build (SDRT_WITH_CUDA=OFF, in build-cpu/) runs the CPU
# tests too, so both configurations stay green (the benchmarks and examples are built by the
# main build only); a third build without CUDA, MPI and NCCL
# (build-local/) runs them again, which proves every local operation (DistributeTensor,
# sharding, checkpoints, state-dict operations) builds and works without a communicator;
# it builds sdrt as the shared libsdrt.so (BUILD_SHARED_LIBS=ON). After the tests of the main
# and of the local build, scripts/install-check.sh installs each (static, then shared) into a
# temporary prefix and builds a consumer program against it (a few seconds each).
# Last, when the main build has CUDA and NCCL, the GPU check's dry run
# (scripts/device-check.sh --dry-run, in build-device-dry/): the dependency bundle for a lent
# GPU machine is made and proven, and what the check runs is configured against the bundle
# alone and built, so a broken bundle or check target fails here, not on the GPU machine.
# At the very end, every libFuzzer target for 6 s (scripts/fuzz.sh 6, in build-fuzz/;
# skipped with a message without clang/libFuzzer): about 3 minutes of build alone on
# 2 cores, then 1.5 minutes of runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SDRT_BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
echo "== tests: $build" >&2
(cd "$build" && ctest --output-on-failure -j"$(nproc)" "$@")
"$root/scripts/install-check.sh" "$build"
if grep -q '^SDRT_CONFIGURED_WITH_CUDA:INTERNAL=ON' "$build/CMakeCache.txt"; then
  cpu_build=${SDRT_CPU_BUILD_DIR:-$root/build-cpu}
  SDRT_BUILD_DIR=$cpu_build "$root/scripts/build.sh" -DSDRT_WITH_CUDA=OFF -DSDRT_BUILD_BENCH=OFF \
    -DSDRT_BUILD_EXAMPLES=OFF
  echo "== tests: $cpu_build (CUDA off)" >&2
  (cd "$cpu_build" && ctest --output-on-failure -j"$(nproc)" -L cpu "$@")
fi
local_build=${SDRT_LOCAL_BUILD_DIR:-$root/build-local}
if [ -f "$local_build/CMakeCache.txt" ]; then  # a build folder configured before it was shared
  cmake -S "$root" -B "$local_build" -DBUILD_SHARED_LIBS=ON >/dev/null
fi
SDRT_BUILD_DIR=$local_build "$root/scripts/build.sh" -DSDRT_WITH_CUDA=OFF -DSDRT_WITH_MPI=OFF \
  -DSDRT_BUILD_BENCH=OFF -DBUILD_SHARED_LIBS=ON
echo "== tests: $local_build (no CUDA, MPI or NCCL; shared libsdrt.so)" >&2
(cd "$local_build" && ctest --output-on-failure -j"$(nproc)" -L cpu "$@")
"$root/scripts/install-check.sh" "$local_build"
if grep -q '^SDRT_CONFIGURED_WITH_CUDA:INTERNAL=ON' "$build/CMakeCache.txt" &&
   grep -q '^NCCL_LIBRARY:FILEPATH=/' "$build/CMakeCache.txt"; then
  echo "== GPU check dry run: ${SDRT_DEVICE_BUILD_DIR:-$root/build-device-dry}" >&2
  "$root/scripts/device-check.sh" --dry-run
fi
"$root/scripts/fuzz.sh" 6
