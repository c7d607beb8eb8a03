#!/usr/bin/env bash
# Builds the CPU suite with AddressSanitizer + UndefinedBehaviorSanitizer (gcc,
# -DSDRT_SANITIZE=ON: -fsanitize=address,undefined -fno-omit-frame-pointer; CUDA and the
# benchmarks off) in ${SDRT_SANITIZE_BUILD_DIR:-build-sanitize} and runs every CPU test
# with CTest, the multi-rank MPI tests included (labels cpu, cpu_fuzz and mpi). Leaks are errors
# (ASan detect_leaks=1), except MPICH's own allocations at MPI_Init, suppressed by name in
# scripts/lsan.supp; UBSan halts on the first finding (halt_on_error=1). Huge allocations
# return null (allocator_may_return_null=1), as they do without ASan, so the tests of
# ResourceExhausted paths still see the error sdrt reports. Extra arguments go to ctest
# (e.g. -R safetensors). Not part of scripts/test.sh: on the 2-core CI machine a first build
# took 69 minutes while fuzzers and three other builds shared the cores (about 25 minutes
# alone), and the tests 8.2 minutes, which CI's 45 minutes cannot hold beside the rest;
# run it before a change lands.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SDRT_SANITIZE_BUILD_DIR:-$root/build-sanitize}
"$root/scripts/install-deps.sh"
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:strict_string_checks=1:detect_stack_use_after_return=1
export LSAN_OPTIONS=suppressions=$root/scripts/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# ASan's frames are several times larger than a plain build's: the test that nests a state
# dict to its 1000-level limit needs more than the default 8 MiB of stack under ASan.
ulimit -s 65536 2>/dev/null || ulimit -s unlimited 2>/dev/null || true
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSDRT_SANITIZE=ON \
    -DSDRT_WITH_CUDA=OFF -DSDRT_BUILD_BENCH=OFF >/dev/null
fi
echo "sanitize.sh: building in $build (a first build takes about 25 minutes on 2 cores)" >&2
cmake --build "$build" -j"$(nproc)" >/dev/null || cmake --build "$build" -j1
echo "== sanitized tests: $build" >&2
(cd "$build" && ctest --output-on-failure -j"$(nproc)" -L '^(cpu|cpu_fuzz|mpi)$' "$@")
