#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, -DSDRT_BUILD_FUZZ=ON: ASan + UBSan +
# libFuzzer coverage; no backend, as the parsers need none; tests and benchmarks off) in
# ${SDRT_FUZZ_BUILD_DIR:-build-fuzz} and runs each for SECONDS (default 60) over a copy of
# its seed corpus tests/fuzz/corpus/<target>/. Prints one line per target (runs, seconds,
# coverage, result) and exits 1 on any crash, leak, timeout or out-of-memory, naming the
# saved input (<build>/fuzz-artifacts/<target>/). New inputs go to a temporary folder,
# removed at the end; with --grow, those that add coverage are merged into the committed
# corpus.
# Exits 0 with "skipped" when clang or libFuzzer is missing (scripts/install-deps.sh
# installs both). scripts/test.sh runs `scripts/fuzz.sh 6`. On the 2-core CI machine the
# first build takes about 1.5 minutes alone (86 s in a cold CI run, 2026-12-04); a rebuild
# after a library change recompiles only what changed; the runs take 6 s per target plus
# start-up (10 targets: about 1.5 minutes); `scripts/fuzz.sh 600`, ten minutes a target, takes
# about 82 minutes.
#
#   scripts/fuzz.sh [--grow] [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SDRT_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=60
grow=0
for arg in "$@"; do
  case "$arg" in
    --grow) grow=1 ;;
    ''|*[!0-9]*) echo "usage: scripts/fuzz.sh [--grow] [SECONDS]" >&2; exit 2 ;;
    *) seconds=$arg ;;
  esac
done

"$root/scripts/install-deps.sh"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  > "$probe/probe.cc"
if ! command -v clang++ >/dev/null 2>&1 ||
   ! clang++ -fsanitize=fuzzer,address,undefined "$probe/probe.cc" -o "$probe/probe" \
     >/dev/null 2>&1; then
  echo "fuzz.sh: skipped: clang/libFuzzer not found (scripts/install-deps.sh installs clang" \
       "and libclang-rt-dev)" >&2
  exit 0
fi

start=$(date +%s)
if [ ! -f "$build/CMakeCache.txt" ]; then
  # -O1 with line tables only: libFuzzer's usual level, and a crash's stack still names
  # files and lines (full -g costs a third of the compile time).
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
    -DSDRT_BUILD_FUZZ=ON -DSDRT_WITH_CUDA=OFF -DSDRT_WITH_MPI=OFF -DSDRT_WITH_NCCL=OFF \
    -DSDRT_BUILD_TESTS=OFF -DSDRT_BUILD_BENCH=OFF -DSDRT_BUILD_EXAMPLES=OFF \
    >/dev/null
fi
echo "fuzz.sh: building in $build" >&2
cmake --build "$build" -j"$(nproc)" --target sdrt_fuzz >/dev/null ||
  cmake --build "$build" -j1 --target sdrt_fuzz
echo "fuzz.sh: built in $(( $(date +%s) - start )) s; running each target for $seconds s" >&2

failed=0
for exe in "$build"/tests/fuzz/*_fuzz; do
  target=$(basename "$exe")
  corpus=$root/tests/fuzz/corpus/$target
  new=$probe/new/$target
  artifacts=$build/fuzz-artifacts/$target
  log=$build/fuzz-logs/$target.log
  mkdir -p "$new" "$artifacts" "$(dirname "$log")" "$corpus"
  rc=0
  t0=$(date +%s)
  # The first folder receives the new inputs; the committed corpus is only read.
  "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$new" "$corpus" >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  secs=$(( $(date +%s) - t0 ))
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  if [ "$rc" -eq 0 ]; then
    result=ok
    if [ "$grow" -eq 1 ]; then
      "$exe" -merge=1 "$corpus" "$new" >>"$log" 2>&1
      result="ok, corpus now $(ls "$corpus" | wc -l) inputs"
    fi
  else
    failed=1
    input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    kind=$(basename "${input:-failure-}" | cut -d- -f1)
    result="FAILED ($kind, exit $rc): input $input, log $log"
  fi
  printf '%-26s %10s runs  %4s s  cov %6s  %s\n' "$target" "${runs:-?}" "${secs:-?}" \
    "${cov:-?}" "$result"
done
echo "fuzz.sh: done in $(( $(date +%s) - start )) s" >&2
exit "$failed"
