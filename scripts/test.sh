#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test with CTest.
# GPU tests (label gpu) skip with a message when no CUDA device is present.
#  1. The main build (build/, RelWithDebInfo, the static libsdrt.a): every test, the Python
#     module's among them (against sdrt_python_library, the same objects linked as a shared
#     library: tests/CMakeLists.txt), then scripts/install-check.sh, which installs it into a
#     temporary prefix and builds and runs against it what a user writes: a C++ consumer,
#     the C header alone, and the two examples (examples/engine in C, examples/trainer in
#     C++) under mpiexec when the build has MPI.
#  2. build-local/ (no CUDA, MPI or NCCL; shared) builds the library, the CLI and the test
#     binaries labelled cpu_nobackend (the target sdrt_nobackend_tests) and runs those: it
#     proves the whole library builds without a backend and that what needs no other
#     process works there: LoadStateDict and DistributeStateDict without a communicator,
#     the reshard planner, the collectives over a SelfCommunicator, the CLI's one-rank
#     commands and exit codes. Then its install check.
#  3. When the main build has CUDA and NCCL, the GPU check's dry run
#     (scripts/device-check.sh --dry-run, in build-device-dry/): the dependency bundle for a
#     lent GPU machine is made and proven, and what the check runs is configured against
#     the bundle alone and built, so a broken bundle or check target fails here, not on the
#     GPU machine.
#  4. Every libFuzzer target for 6 s (scripts/fuzz.sh 6, in build-fuzz/; skipped with a
#     message without clang/libFuzzer).
# The builds after the main one only check (they ship nothing and nobody debugs them): they
# compile at -O0 without debug info, about a third of the main build's compile time a
# file. Each build precompiles the headers nearly every file includes (SDRT_PCH,
# CMakeLists.txt), and the main build compiles the tests' own code at -Og
# (tests/CMakeLists.txt). Each step's
# seconds are printed as it ends; docs/DEVELOPING.md ("CI") has the times of a cold run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# "== step: N s" for the step that just ended.
step_start=$SECONDS
step_done() {
  echo "== $1: $((SECONDS - step_start)) s" >&2
  step_start=$SECONDS
}
build=${SDRT_BUILD_DIR:-$root/build}
check_flags=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG"
             "-DCMAKE_C_FLAGS_RELEASE=-O0 -DNDEBUG" -DBUILD_SHARED_LIBS=ON)
# A checking build folder configured before it built the shared library becomes shared.
shared_again() {
  if [ -f "$1/CMakeCache.txt" ]; then cmake -S "$root" -B "$1" -DBUILD_SHARED_LIBS=ON >/dev/null; fi
}
"$root/scripts/build.sh"
step_done "main build"
echo "== tests: $build" >&2
(cd "$build" && ctest --output-on-failure -j"$(nproc)" "$@")
"$root/scripts/install-check.sh" "$build"
step_done "main tests and install check"
local_build=${SDRT_LOCAL_BUILD_DIR:-$root/build-local}
shared_again "$local_build"
SDRT_BUILD_DIR=$local_build SDRT_BUILD_TARGETS="sdrt sdrt_cli sdrt_nobackend_tests" \
  "$root/scripts/build.sh" -DSDRT_WITH_CUDA=OFF -DSDRT_WITH_MPI=OFF -DSDRT_BUILD_BENCH=OFF \
  -DSDRT_BUILD_EXAMPLES=OFF "${check_flags[@]}"
echo "== tests: $local_build (no CUDA, MPI or NCCL; shared libsdrt.so)" >&2
(cd "$local_build" && ctest --output-on-failure -j"$(nproc)" -L cpu_nobackend "$@")
"$root/scripts/install-check.sh" "$local_build"
step_done "build-local"
if grep -q '^SDRT_CONFIGURED_WITH_CUDA:INTERNAL=ON' "$build/CMakeCache.txt" &&
   grep -q '^NCCL_LIBRARY:FILEPATH=/' "$build/CMakeCache.txt"; then
  echo "== GPU check dry run: ${SDRT_DEVICE_BUILD_DIR:-$root/build-device-dry}" >&2
  "$root/scripts/device-check.sh" --dry-run
  step_done "GPU check dry run"
fi
"$root/scripts/fuzz.sh" 6
step_done "fuzzing"
