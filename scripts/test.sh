#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test with CTest.
# GPU tests (label gpu) skip with a message when no CUDA device is present. When the main
# build has CUDA, a second build with MPI but without CUDA (build-cpu/) makes the shared
# libsdrt.so and the CLI only (SDRT_BUILD_TARGETS) and runs the Python module's tests against
# that library (ctest -R '^python_', one of them under mpiexec): no test binary, as every CPU
# test already runs in the main build and in build-local/, and the library has no #if on
# CUDA or MPI (a configuration only chooses which files are built). A third build without
# CUDA, MPI and NCCL (build-local/) runs the CPU tests again, which proves the whole library
# builds without a backend and that everything needing no other process works there: every
# local operation (DistributeTensor, sharding, checkpoints, state-dict operations),
# LoadStateDict and DistributeStateDict without a communicator, the reshard planner, and the
# collectives over a SelfCommunicator. The main build makes the static libsdrt.a, the other
# two the shared libsdrt.so (BUILD_SHARED_LIBS=ON). After each build's tests,
# scripts/install-check.sh installs it into a temporary prefix and builds and runs against
# it what a user writes: a C++ consumer, the C header alone, and the two examples
# (examples/engine in C, examples/trainer in C++) under mpiexec when the build has MPI.
# Last, when the main build has CUDA and NCCL, the GPU check's dry run
# (scripts/device-check.sh --dry-run, in build-device-dry/): the dependency bundle for a lent
# GPU machine is made and proven, and what the check runs is configured against the bundle
# alone and built, so a broken bundle or check target fails here, not on the GPU machine.
# At the very end, every libFuzzer target for 6 s (scripts/fuzz.sh 6, in build-fuzz/;
# skipped with a message without clang/libFuzzer): about 3 minutes of build alone on
# 2 cores, then 1.5 minutes of runs.
# The builds after the main one only check (they ship nothing and nobody debugs them): they
# compile at -O1 without debug info, which halves their compile time (tests/core/state_dict/
# flatten_test.cc: 13.1 CPU-s at -O2 -g, 6.6 at -O1; the main build keeps RelWithDebInfo).
# Each build precompiles the headers nearly every file includes (SDRT_PCH, CMakeLists.txt).
# A cold run (clean clone, no ccache) took 29-33 minutes alone on the 2-core CI machine before
# issue 29; see docs/DEVELOPING.md ("CI") for the time it takes now.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SDRT_BUILD_DIR:-$root/build}
check_flags=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG"
             "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG" -DBUILD_SHARED_LIBS=ON)
# A checking build folder configured before it built the shared library becomes shared.
shared_again() {
  if [ -f "$1/CMakeCache.txt" ]; then cmake -S "$root" -B "$1" -DBUILD_SHARED_LIBS=ON >/dev/null; fi
}
"$root/scripts/build.sh"
echo "== tests: $build" >&2
(cd "$build" && ctest --output-on-failure -j"$(nproc)" "$@")
"$root/scripts/install-check.sh" "$build"
if grep -q '^SDRT_CONFIGURED_WITH_CUDA:INTERNAL=ON' "$build/CMakeCache.txt"; then
  cpu_build=${SDRT_CPU_BUILD_DIR:-$root/build-cpu}
  shared_again "$cpu_build"
  SDRT_BUILD_DIR=$cpu_build SDRT_BUILD_TARGETS="sdrt sdrt_cli" "$root/scripts/build.sh" \
    -DSDRT_WITH_CUDA=OFF -DSDRT_BUILD_BENCH=OFF -DSDRT_BUILD_EXAMPLES=OFF "${check_flags[@]}"
  echo "== tests: $cpu_build (CUDA off; shared libsdrt.so; the Python module)" >&2
  (cd "$cpu_build" && ctest --output-on-failure -j"$(nproc)" -R '^python_' "$@")
  "$root/scripts/install-check.sh" "$cpu_build"
fi
local_build=${SDRT_LOCAL_BUILD_DIR:-$root/build-local}
shared_again "$local_build"
SDRT_BUILD_DIR=$local_build "$root/scripts/build.sh" -DSDRT_WITH_CUDA=OFF -DSDRT_WITH_MPI=OFF \
  -DSDRT_BUILD_BENCH=OFF "${check_flags[@]}"
echo "== tests: $local_build (no CUDA, MPI or NCCL; shared libsdrt.so)" >&2
(cd "$local_build" && ctest --output-on-failure -j"$(nproc)" -L cpu "$@")
"$root/scripts/install-check.sh" "$local_build"
if grep -q '^SDRT_CONFIGURED_WITH_CUDA:INTERNAL=ON' "$build/CMakeCache.txt" &&
   grep -q '^NCCL_LIBRARY:FILEPATH=/' "$build/CMakeCache.txt"; then
  echo "== GPU check dry run: ${SDRT_DEVICE_BUILD_DIR:-$root/build-device-dry}" >&2
  "$root/scripts/device-check.sh" --dry-run
fi
"$root/scripts/fuzz.sh" 6
