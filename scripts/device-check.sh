#!/usr/bin/env bash
# The GPU check, in one call on a lent GPU machine (nvcc, cmake and python3, but no MPICH and
# no Debian -dev packages), and its dry run on any machine with the CUDA toolkit.
#
#   scripts/device-check.sh --dry-run   no GPU needed (CI runs it): makes the dependency
#       bundle .devdeps/ (scripts/device-bundle.sh), configures exactly as the real check
#       does but with the machine's own packages ignored (CMAKE_IGNORE_PREFIX_PATH "/usr;/"),
#       checks in CMakeCache.txt that every package came from the bundle, and builds the
#       target sdrt_device_check: every test labelled gpu, the benchmarks and the CLI that
#       the real check runs. Build folder: $SDRT_DEVICE_BUILD_DIR or build-device-dry/.
#   scripts/device-check.sh             the real check. Here: scripts/device-bundle.sh; then
#       device run, carry [".devdeps"], command "scripts/device-check.sh", timeout_s 540.
#   scripts/device-check.sh --nccl-only the follow-up, a second shorter run on the same
#       lease: env, configure, build, then the NCCL steps alone (command
#       "scripts/device-check.sh --nccl-only", timeout_s 300).
#   scripts/device-check.sh --list      the steps the check runs, in order, one line.
#
# The real check runs these steps, each under its own `timeout` and all within
# $SDRT_CHECK_BUDGET_S seconds (default 450; a step that would start with under 15 s left is
# "not run"), in this order, what has never run on a GPU first: env (GPUs, compute mode,
# driver, OS release, compiler, glibc, cmake, python3, the NCCL_* and CUDA_* environment),
# configure (NCCL only where find_nccl finds it, else its steps are "not run: no NCCL"),
# build (the target sdrt_device_check); ctest -L gpu without the NCCL tests (fails when a
# test skips for want of a device while one is visible; other skips are counted and listed,
# e.g. "needs two CUDA devices" on one GPU); an NCCL smoke test (one one-rank communicator,
# 30 s) and, only when it passes, ctest -L gpu of the NCCL tests and one-rank `sdrt load
# --device cuda` of the demo checkpoint and of a gpt2-shaped bf16 one (made on the spot);
# then compute-sanitizer (--report-api-errors no) memcheck and initcheck on the kernel and
# runtime tests without their multi-GiB cases, racecheck on the one kernel that shares
# memory between threads (the FP8 amax reduce; racecheck of the others can find nothing),
# the load row (load-h2d: one rank's LoadStateDict, 4 readers, of a llama-shaped checkpoint of
# about 2 GB into the GPU against a 4-thread pread and pinned cudaMemcpyAsync of the same
# bytes in the same process, planning
# and the first call's pinned staging allocation timed apart; bench/load_device_bench.cc),
# and the kernel and pinned-memory benchmarks (each case against cudaMemcpy of the same
# bytes in the same run). A ratio under 0.9 (the load's: to the slower of its two floors)
# is the result "under 0.9x", never ok. ctest runs 4 tests at a time only
# when the GPU's compute mode is Default. NCCL logs (NCCL_DEBUG=WARN unless set) go to files
# in the logs, never to stdout. After the table a coverage line names every step not run and
# counts the tests that skipped (multi-rank NCCL tests on one GPU among them).
# Output in $OUT (or /tmp/sdrt-device-out), at most 8 files: table.txt, env.txt,
# kernels_bench.json, pinned_bench.json, load.json, load_gpt2.json, load_h2d.json and
# logs.tgz (every
# step's log); table.txt and logs.tgz are rewritten after every step and on SIGTERM/SIGINT,
# so a check killed on the way still returns them. The table is printed last. Exit status
# 0 only when every step passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=check
case "${1:-}" in
  --dry-run) mode=dry ;;
  --nccl-only) mode=nccl ;;
  --list) mode=list ;;
  "") ;;
  *) echo "usage: scripts/device-check.sh [--dry-run | --nccl-only | --list]" >&2; exit 2 ;;
esac
# The steps, in the order the check runs them (the NCCL-only follow-up: the first and the
# NCCL ones).
first_steps=(env bundle configure build)
nccl_steps=(nccl-smoke ctest-nccl load load-gpt2)
later_steps=(memcheck-kernels memcheck-runtime initcheck-kernels initcheck-runtime
             racecheck-fp8 load-h2d bench-kernels bench-pinned)
planned_steps() {
  if [ "$1" = nccl ]; then
    echo "${first_steps[*]} ${nccl_steps[*]}"
  else
    echo "${first_steps[*]} ctest-gpu ${nccl_steps[*]} ${later_steps[*]}"
  fi
}
if [ "$mode" = list ]; then
  planned_steps check
  exit 0
fi
deps=$root/.devdeps/usr
have_nccl=1
arch=x86_64-linux-gnu
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=$deps/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# The test cases that move GiB of memory, left out of the sanitizer runs (gtest filter).
sanitizer_skip='*BeyondInt32*'
# initcheck also leaves out the 64 MiB copy still in flight on a non-blocking stream: on the
# H200 (2026-12-04) initcheck did not finish it in 90 s, though it takes 0.66 s alone and under
# memcheck (which keeps it).
initcheck_skip="$sanitizer_skip:CudaRuntimeGpu.StagedCopyToHostRunsOnTheCallersStream"
# The kernel test racecheck runs: the FP8 amax reduces in shared memory (no other kernel
# shares memory between threads).
racecheck_test='Fp8KernelsGpu.OneCutBoxOfBfloat16'

# NCCL's header folder and library, one a line, from the first place that has both: the CUDA
# toolkit, the system folders, or the nvidia-nccl Python package (which ships libnccl.so.2
# only, so the library is passed to CMake by its full path).
find_nccl() {
  local py places place inc lib so
  py=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null) || py=
  places=("/usr/local/cuda/include:/usr/local/cuda/lib64" "/usr/include:/usr/lib/$arch")
  [ -n "$py" ] && places+=("$py/include:$py/lib")
  for place in "${places[@]}"; do
    inc=${place%%:*}
    lib=${place#*:}
    [ -f "$inc/nccl.h" ] || continue
    for so in "$lib/libnccl.so" "$lib/libnccl.so.2"; do
      if [ -e "$so" ]; then
        printf '%s\n%s\n' "$inc" "$so"
        return 0
      fi
    done
  done
  return 1
}

# The configure command line both modes share (plus the ignored prefixes in the dry run).
configure_args() {
  local nccl
  cfg=(-S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSDRT_WITH_MPI=OFF
       -DSDRT_WITH_CUDA=ON -DSDRT_WITH_NCCL=ON -DCMAKE_CUDA_ARCHITECTURES=90
       -DSDRT_BUILD_TESTS=ON -DSDRT_BUILD_BENCH=ON "-DCMAKE_PREFIX_PATH=$deps")
  if command -v ninja >/dev/null && [ ! -f "$build/CMakeCache.txt" ]; then cfg+=(-G Ninja); fi
  if nccl=$(find_nccl); then
    cfg+=("-DNCCL_INCLUDE_DIR=${nccl%%$'\n'*}" "-DNCCL_LIBRARY=${nccl#*$'\n'}")
    LD_LIBRARY_PATH=$(dirname "${nccl#*$'\n'}"):$LD_LIBRARY_PATH
  else
    # No NCCL on the machine: the steps without NCCL still run; those with it are "not run".
    cfg+=(-DSDRT_WITH_NCCL=OFF)
    have_nccl=0
  fi
}

if [ "$mode" = dry ]; then
  set -e
  start=$SECONDS
  build=${SDRT_DEVICE_BUILD_DIR:-$root/build-device-dry}
  "$root/scripts/device-bundle.sh"
  configure_args
  cfg+=("-DCMAKE_IGNORE_PREFIX_PATH=/usr;/")
  # The dry run proves that the bundle configures and the check's targets build; it runs
  # none of them, so it compiles without debug info, C and C++ at -O0 and CUDA at -O1 (a
  # third of RelWithDebInfo's CPU time; the lent machine builds RelWithDebInfo).
  cfg+=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG"
        "-DCMAKE_C_FLAGS_RELEASE=-O0 -DNDEBUG" "-DCMAKE_CUDA_FLAGS_RELEASE=-O1 -DNDEBUG")
  echo "device-check --dry-run: configuring in $build" >&2
  cmake "${cfg[@]}" >"$build.configure.log" 2>&1 || { tail -40 "$build.configure.log"; exit 1; }
  configured=$SECONDS
  # Every path found (package folders, headers, libraries; CMake's own tools and the python3
  # that would run the Python module's tests aside) lies in the bundle or the CUDA toolkit.
  cuda=$(readlink -f /usr/local/cuda)
  bad=$(grep -E '^[A-Za-z0-9_]+:(PATH|FILEPATH)=/' "$build/CMakeCache.txt" |
        grep -vE '^(CMAKE_|SDRT_PYTHON3:)' |
        grep -vE "=($deps|$cuda|/usr/local/cuda)(/|$)" || true)
  if [ -n "$bad" ]; then
    echo "device-check --dry-run: found outside the bundle and the CUDA toolkit:" >&2
    echo "$bad" >&2
    exit 1
  fi
  grep -E '^(absl|GTest|benchmark|CLI11|nlohmann_json|dlpack)_DIR:|^(XXHASH|NCCL)_(INCLUDE_DIR|LIBRARY):' \
    "$build/CMakeCache.txt" | sed 's/^/  /'
  echo "device-check --dry-run: building sdrt_device_check" >&2
  cmake --build "$build" -j"$(nproc)" --target sdrt_device_check >"$build.build.log" 2>&1 ||
    { tail -60 "$build.build.log"; exit 1; }
  for f in tests/kernels_gpu_test tests/runtime_gpu_test bench/kernels_bench \
           bench/state_dict_ops_bench bench/load_device_bench bin/sdrt; do
    [ -x "$build/$f" ] || { echo "device-check --dry-run: $build/$f was not built" >&2; exit 1; }
  done
  gpu_tests=$(ctest --test-dir "$build" -N -L gpu | grep -oE '^Total Tests: [0-9]+' | grep -oE '[0-9]+')
  echo "device-check --dry-run: passed in $((SECONDS - start)) s (bundle and configure" \
       "$((configured - start)) s, build $((SECONDS - configured)) s); $gpu_tests tests labelled gpu"
  echo "device-check --dry-run: the check runs, in order: $(planned_steps check)"
  echo "device-check --dry-run: the follow-up (--nccl-only): $(planned_steps nccl)"
  exit 0
fi

# ---------------------------------------------------------------------------------------
# The real check.
out=${OUT:-/tmp/sdrt-device-out}
build=${SDRT_DEVICE_BUILD_DIR:-/tmp/sdrt-gpu}
budget=${SDRT_CHECK_BUDGET_S:-450}
logs=$(mktemp -d "${TMPDIR:-/tmp}/sdrt-device-logs.XXXXXX")
work=$(mktemp -d "${TMPDIR:-/tmp}/sdrt-device-work.XXXXXX")
trap 'rm -rf "$logs" "$work"' EXIT
mkdir -p "$out"
deadline=$((SECONDS + budget))
rows=()
failed=0
current=
child=
# NCCL's warnings go to a file per process in the logs, never to stdout (where they would
# corrupt `sdrt load --json`); NCCL_DEBUG=INFO in the caller's environment is kept.
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export NCCL_DEBUG_FILE=$logs/nccl.%h.%p.log
# The GPU test cases that use NCCL (ctest names are gtest's Suite.Test): every Nccl* suite
# but DivideOnDeviceGpuTest (in the same binary, no NCCL), the DTensor collectives on a
# one-rank NCCL communicator, the multi-GPU state dicts and the one-rank CLI on GPU 0.
nccl_tests='^(Nccl[A-Za-z]*|DTensorOpsGpuTest|DistributedStateDictMultiGpu|ReshardGpuTest|'
nccl_tests+='ReshardMultiGpu|OneRankCli)\.'
# The NCCL smoke test: one one-rank communicator and a barrier (under the tests' own
# 60 s NCCL timeout; the step's limit is shorter still).
nccl_smoke='NcclCommunicatorGpuTest.Identity'

# The table so far.
table() {
  printf '%-18s %-14s %5s  %s\n' step result s figure
  local row name result seconds figure
  for row in "${rows[@]}"; do
    IFS='|' read -r name result seconds figure <<<"$row"
    printf '%-18s %-14s %5s  %s\n' "$name" "$result" "$seconds" "$figure"
  done
}

# Writes table.txt and logs.tgz as they stand (each replaced whole), so that a check killed
# at any point still leaves both.
publish() {
  { table; echo "device-check: $1, $SECONDS s of a ${budget} s budget"; } >"$out/table.txt.part" &&
    mv -f "$out/table.txt.part" "$out/table.txt"
  tar -czf "$out/logs.tgz.part" -C "$logs" . 2>/dev/null && mv -f "$out/logs.tgz.part" "$out/logs.tgz"
}

# On SIGTERM or SIGINT (e.g. the device call's own timeout): stops the running step, records
# it as killed and publishes what there is.
# shellcheck disable=SC2317  # called by the traps below
interrupted() {
  trap - TERM INT
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
  took=0
  rows+=("${current:-check}|killed|0|the check got SIG$1 $SECONDS s in")
  publish "KILLED by SIG$1"
  table >&2
  exit 1
}
trap 'interrupted TERM' TERM
trap 'interrupted INT' INT

# step NAME LIMIT_S CMD...: runs CMD with its output in $logs/NAME.log under `timeout`, for at
# most LIMIT_S seconds and never past the deadline; sets rc (124 or 137: timed out; -1: not
# run, the budget is spent) and took (seconds). CMD runs in the background and is waited
# for, so that a signal to this script is handled at once (a trap waits for a foreground
# command).
step() {
  local name=$1 limit=$2 left
  shift 2
  left=$((deadline - SECONDS))
  took=0
  if [ "$left" -lt 15 ]; then
    echo "not run: ${left}s of the check's ${budget}s budget left" >"$logs/$name.log"
    rc=-1
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (at most ${limit}s)" >&2
  local t0=$SECONDS
  current=$name
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1 </dev/null &
  child=$!
  wait "$child"
  rc=$?
  child=
  current=
  took=$((SECONDS - t0))
}

# record NAME RESULT FIGURE: one row of the table; any RESULT but "ok" fails the check.
record() {
  rows+=("$1|$2|$took|$3")
  [ "$2" = ok ] || failed=1
  publish "running"
}

# The result word for exit status $1.
verdict() {
  case $1 in
    0) echo ok ;;
    -1) echo "not run" ;;
    124 | 137) echo timeout ;;
    *) echo "failed rc=$1" ;;
  esac
}

# A step's last line of output, for the figure column of a failure.
last_line() { tail -n 1 "$logs/$1.log" | cut -c1-60; }

# sanitize NAME TOOL BINARY FILTER: compute-sanitizer TOOL on one test binary. memcheck and
# initcheck end with "ERROR SUMMARY: N errors", racecheck with "RACECHECK SUMMARY: N hazards
# displayed (E errors, W warnings)" (its errors count; warnings are shown).
sanitize() {
  local name=$1 tool=$2 bin=$3 filter=$4 errors tests summary warnings=
  step "$name" 90 "$sanitizer" --tool "$tool" --report-api-errors no --error-exitcode 9 \
    --print-limit 50 "$bin" --gtest_filter="$filter"
  if [ "$tool" = racecheck ]; then
    summary=$(grep -oE 'RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?, [0-9]+ warnings?\)' \
      "$logs/$name.log" | tail -1)
    errors=$(sed -nE 's/.*\(([0-9]+) errors?,.*/\1/p' <<<"$summary")
    warnings=$(sed -nE 's/.*, ([0-9]+) warnings?\)$/\1/p' <<<"$summary")
  else
    errors=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$logs/$name.log" | grep -oE '[0-9]+' | tail -1)
  fi
  tests=$(grep -oE '^\[  PASSED  \] [0-9]+ test' "$logs/$name.log" | grep -oE '[0-9]+')
  skips=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$logs/$name.log" | grep -oE '[0-9]+')
  local counts="0 errors${warnings:+ ($warnings warnings)}"
  if [ "$gpus" -gt 0 ] && grep -q 'no CUDA device' "$logs/$name.log"; then
    record "$name" "bad skips" "'no CUDA device' with $gpus GPU(s); ${tests:-0} tests passed"
  elif [ "$rc" = 0 ] && [ "${errors:-x}" = 0 ] && [ "${tests:-0}" -gt 0 ]; then
    record "$name" ok "$counts, $tests tests passed, ${skips:-0} skipped"
  elif [ "$rc" = 0 ] && [ "${errors:-x}" = 0 ]; then
    record "$name" "no tests" "0 tests passed, ${skips:-0} skipped"
  elif [ "$rc" = 0 ]; then
    record "$name" "no summary" "no $tool summary in the log; $(last_line "$name")"
  elif [ "$rc" = -1 ]; then
    record "$name" "not run" "$(last_line "$name")"
  else
    record "$name" "$(verdict "$rc")" "${errors:-?} errors; $(last_line "$name")"
  fi
}

# ctest_step NAME LIMIT_S CTEST_ARGS...: `ctest -L gpu` over some of the GPU tests. Fails when
# a test skips for want of a device while one is visible; other skips (e.g. "needs two CUDA
# devices") are counted, and listed with their reasons in $logs/NAME.skips.txt.
ctest_step() {
  local name=$1 limit=$2 total nfailed skipped no_device figure result
  shift 2
  step "$name" "$limit" ctest --test-dir "$build" -L gpu -j"$jobs" --output-on-failure "$@"
  cp "$build/Testing/Temporary/LastTest.log" "$logs/$name.LastTest.log" 2>/dev/null
  # ctest ends with "93% tests passed, 3 tests failed out of 46" or, when none failed,
  # "100% tests passed out of 33".
  total=$(grep -oE 'tests (failed|passed) out of [0-9]+' "$logs/$name.log" | grep -oE '[0-9]+$')
  nfailed=$(grep -oE '[0-9]+ tests failed out of' "$logs/$name.log" | grep -oE '^[0-9]+')
  [ -n "$total" ] && [ -z "$nfailed" ] && nfailed=0
  skipped=$(grep -cE '\(Skipped\)$' "$logs/$name.log")
  # Why each skipped test skipped (the line after gtest's "Skipped"), counted.
  grep -A1 -E ': Skipped$' "$logs/$name.LastTest.log" 2>/dev/null | grep -vE '(: Skipped|^--)$' |
    sort | uniq -c >"$logs/$name.skips.txt"
  no_device=$(awk '/no CUDA device/ { n += $1 } END { print n + 0 }' "$logs/$name.skips.txt")
  figure="$((${total:-0} - ${nfailed:-0} - skipped)) passed, ${nfailed:-?} failed, $skipped skipped of ${total:-?}"
  result=$(verdict "$rc")
  if [ "$rc" = -1 ]; then
    figure=$(last_line "$name")
  elif [ "$rc" = 0 ] && [ "${total:-0}" = 0 ]; then
    result="no tests"
  elif [ "$rc" = 0 ] && [ "$no_device" != 0 ] && [ "$gpus" != 0 ]; then
    result="bad skips"
    figure+="; $no_device for 'no CUDA device' with $gpus GPU(s)"
  fi
  record "$name" "$result" "$figure"
}

# The benchmark and load summaries: bench_summary KIND JSON prints a table of the run's cases
# to stdout and one figure last; exit 1 when a case errored or reported a wrong byte, 3 when
# the figure's ratio to cudaMemcpy of the same bytes is under 0.9.
bench_summary() {
  python3 - "$@" <<'PY'
import json, sys
kind, path = sys.argv[1], sys.argv[2]
runs = json.load(open(path))["benchmarks"]
bad = [r["name"] for r in runs if r.get("error_occurred") or r.get("wrong", 0) != 0]
def gbs(r): return r.get("bytes_per_second", 0) / 1e9
print(f"{'case':48s} {'time ms':>9s} {'GB/s':>8s} {'vs memcpy':>9s} {'wrong':>6s}")
for r in runs:
    if r.get("error_occurred"):
        print(f"{r['name']:48s} error: {r.get('error_message', '')}")
        continue
    ratio = f"{r['vs_memcpy']:.2f}" if "vs_memcpy" in r else "-"
    print(f"{r['name']:48s} {r['real_time']:9.3f} {gbs(r):8.1f} {ratio:>9s} {r.get('wrong', 0):6.0f}")
ok = [r for r in runs if not r.get("error_occurred")]
if kind == "kernels":
    cases = [r for r in ok if "vs_memcpy" in r]
    worst = min(cases, key=lambda r: r["vs_memcpy"], default=None)
    base = next((r for r in ok if r["name"].startswith("BM_DeviceMemcpy")), None)
    fig = f"memcpy {gbs(base):.0f} GB/s" if base else "no memcpy row"
    if worst:
        fig += f"; worst {worst['vs_memcpy']:.2f}x ({worst['name'].split('/')[0][3:]})"
else:
    copy = next((r for r in ok if r["name"].startswith("BM_CopyStateDictToPinned")), None)
    arena = next((r for r in ok if r["name"].startswith("BM_CreateCpuPinnedArena/share:0")), None)
    each = next((r for r in ok if r["name"].startswith("BM_CreateCpuPinnedPerTensor/share:0")), None)
    fig = f"copy {copy['vs_memcpy']:.2f}x memcpy" if copy and "vs_memcpy" in copy else "no copy row"
    worst = copy if copy and "vs_memcpy" in copy else None
    if arena and each:
        fig += f"; arena {each['real_time'] / arena['real_time']:.1f}x per-tensor"
if bad:
    fig = f"{len(bad)} bad: {bad[0]}"
print(fig)
sys.exit(1 if bad or not ok else 3 if worst and worst["vs_memcpy"] < 0.9 else 0)
PY
}

# bench KIND LIMIT_S BINARY ARGS...: one benchmark step (bench-KIND) writing KIND_bench.json.
bench() {
  local kind=$1 limit=$2 json=$out/$1_bench.json summary=$logs/bench-$1.summary result
  shift 2
  step "bench-$kind" "$limit" "$@" --benchmark_out="$json" --benchmark_out_format=json
  result=$(verdict "$rc")
  bench_summary "$kind" "$json" >"$summary" 2>&1
  case "$?:$rc" in
    0:*) ;;
    3:0) result="under 0.9x" ;;
    *:0) result="bad cases" ;;
  esac
  record "bench-$kind" "$result" "$(tail -1 "$summary" | cut -c1-70)"
}

# load_summary JSON: one figure from `sdrt load --json`; exit 1 unless bit-exact, 2 (and
# "bad json: ..." as the figure) when the file is not the JSON summary sdrt writes.
load_summary() {
  python3 - "$1" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    fig = (f"{r['bytes'] / 1e6:.1f} MB, {r['tensors']} tensors, {r['seconds']:.3f} s, "
           f"{r['gbps']:.2f} GB/s, bit-exact {'yes' if r['bit_exact'] else 'NO'}")
except Exception as e:  # unreadable, not JSON, or not the summary's fields
    print(f"bad json: {type(e).__name__}: {e}"[:70])
    sys.exit(2)
print(fig)
sys.exit(0 if r["bit_exact"] is True else 1)
PY
}

# load NAME LIMIT_S MAKE_ARGS: makes a synthetic checkpoint, loads it on one rank into the GPU
# (sdrt load has no NCCL timeout flag: the step's limit bounds a hang).
load() {
  local name=$1 limit=$2 make_args=$3 json=$out/${1//-/_}.json figure result
  # shellcheck disable=SC2016  # the arguments expand in the inner shell
  step "$name" "$limit" bash -c '"$1" make $2 "$3" >&2 &&
    "$1" load "$3" --mesh 1 --plan fsdp --device cuda --json >"$4"' \
    _ "$build/bin/sdrt" "$make_args" "$work/$name.safetensors" "$json"
  if [ "$rc" = 0 ]; then
    figure=$(load_summary "$json" 2>>"$logs/$name.log")
    case $? in
      0) result=ok ;;
      1) result="not exact" ;;
      *) result="bad json" ;;
    esac
  else
    result=$(verdict "$rc")
    figure=$(last_line "$name")
  fi
  record "$name" "$result" "$figure"
  rm -f "$work/$name.safetensors"
}

# load_h2d_summary JSON: the load row from load_device_bench's JSON; exit 1 unless bit-exact,
# 2 when the file is not that JSON, 3 when the load runs under 0.9 of the slower floor.
load_h2d_summary() {
  python3 - "$1" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    floor = min(r["pread_gbps"], r["h2d_gbps"])
    ratio = r["load_gbps"] / floor
    fig = (f"pread {r['pread_gbps']:.1f} h2d {r['h2d_gbps']:.1f} load {r['load_gbps']:.1f} GB/s "
           f"={r['load_to_h2d']:.2f}h2d {ratio:.2f}fl plan {1e3 * r['plan_seconds']:.0f}ms "
           f"pin {1e3 * r['first_staging_seconds']:.0f}/{1e3 * r['staging_seconds']:.0f}ms")
except Exception as e:  # unreadable, not JSON, or not the bench's fields
    print(f"bad json: {type(e).__name__}: {e}"[:70])
    sys.exit(2)
print(fig)
sys.exit(1 if r["bit_exact"] is not True else 3 if ratio < 0.9 else 0)
PY
}

# load_h2d LIMIT_S MAKE_ARGS: the load row (bench/load_device_bench.cc) on a checkpoint made
# on the spot; no NCCL needed (one rank, no communicator).
load_h2d() {
  local json=$out/load_h2d.json file=$work/load-h2d.safetensors figure result
  # shellcheck disable=SC2016  # the arguments expand in the inner shell
  step load-h2d "$1" bash -c '"$1" make $2 "$3" >&2 &&
    "$4" --file "$3" --readers 4 --repeat 3 --json "$5"' \
    _ "$build/bin/sdrt" "$2" "$file" "$build/bench/load_device_bench" "$json"
  if [ "$rc" = 0 ] || [ "$rc" = 1 ] && [ -s "$json" ]; then
    figure=$(load_h2d_summary "$json" 2>>"$logs/load-h2d.log")
    case $? in
      0) result=ok ;;
      1) result="not exact" ;;
      3) result="under 0.9x" ;;
      *) result="bad json" ;;
    esac
  else
    result=$(verdict "$rc")
    figure=$(last_line load-h2d)
  fi
  record load-h2d "$result" "$figure"
  rm -f "$file"
}

# The coverage line: the steps that did not run (and, with --nccl-only, those left out) and
# the tests that skipped, summed over the ctest steps with their most common reason.
coverage() {
  local row name result seconds figure missing=() skipped reason
  for row in "${rows[@]}"; do
    IFS='|' read -r name result seconds figure <<<"$row"
    [ "$result" = "not run" ] || [ "$result" = killed ] && missing+=("$name")
  done
  [ "$mode" = nccl ] && missing+=("ctest-gpu and ${later_steps[*]} (--nccl-only)")
  skipped=$(cat "$logs"/*.skips.txt 2>/dev/null | awk '{ n += $1 } END { print n + 0 }')
  reason=$(cat "$logs"/*.skips.txt 2>/dev/null | sort -rn | head -1 | sed -E 's/^ *[0-9]+ *//' |
           cut -c1-60)
  echo "coverage: not run: ${missing[*]:-none}; tests skipped: $skipped${reason:+ (most: $reason)}"
}

# not_run WHY NAME...: a row "not run" for each step named.
not_run() {
  local why=$1 name
  shift
  took=0
  for name in "$@"; do record "$name" "not run" "$why"; done
}

# -- env: the GPUs, their compute mode, the tools, the NCCL and CUDA environment.
nccl=$(find_nccl | tr '\n' ' ')
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/compute-sanitizer/compute-sanitizer)
# shellcheck disable=SC2016
step env 30 bash -c 'nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_mode --format=csv;
  grep -E "^PRETTY_NAME=" /etc/os-release; c++ --version | head -1; ldd --version | head -1;
  nvcc --version | tail -2; cmake --version | head -1; python3 --version; "$1" --version | head -2;
  echo "NCCL: ${2:-not found}"; nproc; env | grep -E "^(NCCL|CUDA)_" | sort' _ "$sanitizer" "$nccl"
cp "$logs/env.log" "$out/env.txt"
gpus=$(timeout 20 nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# ctest runs 4 tests at a time only when every GPU's compute mode is Default (an exclusive
# GPU takes one process at a time; unknown counts as exclusive).
modes=$(timeout 20 nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | sort -u)
jobs=1
[ "$modes" = Default ] && jobs=4
if [ "$gpus" -gt 0 ]; then
  name=$(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  record env ok "$gpus x $name, mode ${modes//$'\n'/+}, ctest -j$jobs"
else
  record env "no GPU" "$(head -n 2 "$logs/env.log" | tr '\n' ' ' | cut -c1-70)"
fi

# -- configure and build only what the check runs, against the carried bundle.
took=0
if [ -f "$deps/include/xxhash.h" ]; then
  record bundle ok "$(du -sh "$root/.devdeps" | cut -f1) in .devdeps"
else
  record bundle missing "no .devdeps: run scripts/device-bundle.sh and carry .devdeps"
fi
configure_args
step configure 120 cmake "${cfg[@]}"
record configure "$(verdict "$rc")" "$(grep -oE 'CUDA=[A-Z]+ NCCL=[A-Z]+ MPI=[A-Z]+' "$logs/configure.log")"
built=1
if [ "$rc" = 0 ]; then
  step build 300 cmake --build "$build" -j"$(nproc)" --target sdrt_device_check
  record build "$(verdict "$rc")" "$(last_line build)"
  [ "$rc" = 0 ] || built=0
else
  built=0
fi

# The steps with NCCL: one one-rank communicator and a barrier within 30 s, or none of the
# others runs.
run_nccl_steps() {
  if [ "$have_nccl" = 0 ]; then
    not_run "no NCCL found (find_nccl)" "${nccl_steps[@]}"
    return
  fi
  step nccl-smoke 30 "$build/tests/nccl_communicator_gpu_test" --gtest_filter="$nccl_smoke"
  if [ "$rc" = 0 ] && grep -qE '^\[  PASSED  \] 1 test' "$logs/nccl-smoke.log" &&
     ! grep -qE '^\[  SKIPPED \]' "$logs/nccl-smoke.log"; then
    record nccl-smoke ok "$nccl_smoke passed"
    # -- the GPU tests that use NCCL.
    ctest_step ctest-nccl 150 --timeout 90 -R "$nccl_tests"
    # -- one-rank loads into the GPU: the demo checkpoint (what `sdrt demo` makes) and a
    # gpt2-shaped bf16 one (about 250 MB).
    load load 60 "--arch tiny-llama --scale 2 --dtype f32 --seed 0"
    load load-gpt2 90 "--arch gpt2 --dtype bf16 --seed 1"
  else
    if [ "$rc" = 0 ]; then
      record nccl-smoke "not passed" "$nccl_smoke did not pass; $(last_line nccl-smoke)"
    elif [ "$rc" = -1 ]; then
      record nccl-smoke "not run" "$(last_line nccl-smoke)"
    else
      record nccl-smoke "$(verdict "$rc")" "$(last_line nccl-smoke)"
    fi
    not_run "nccl smoke failed" "${nccl_steps[@]:1}"
  fi
}

# The steps below run in planned_steps' order (which --list prints and
# tests/scripts/device_check_order_test.sh holds to).
if [ "$built" = 0 ]; then
  # shellcheck disable=SC2046  # the step names are single words
  not_run "the build failed" $(planned_steps "$mode" | cut -d' ' -f5-)
elif [ "$mode" = nccl ]; then
  run_nccl_steps
else
  # What has never run on a GPU first: the GPU tests, then everything with NCCL.
  ctest_step ctest-gpu 120 --timeout 100 -E "$nccl_tests"
  run_nccl_steps
  # -- compute-sanitizer on the kernel and runtime tests.
  sanitize memcheck-kernels memcheck "$build/tests/kernels_gpu_test" "-$sanitizer_skip"
  sanitize memcheck-runtime memcheck "$build/tests/runtime_gpu_test" "-$sanitizer_skip"
  sanitize initcheck-kernels initcheck "$build/tests/kernels_gpu_test" "-$sanitizer_skip"
  sanitize initcheck-runtime initcheck "$build/tests/runtime_gpu_test" "-$initcheck_skip"
  sanitize racecheck-fp8 racecheck "$build/tests/kernels_gpu_test" "$racecheck_test"
  # -- the load row: LoadStateDict into the GPU against its floors, the same bytes.
  load_h2d 60 "--arch llama-8b --scale 0.5 --dtype bf16 --seed 2"
  # -- the benchmarks, against cudaMemcpy of the same bytes.
  bench kernels 90 "$build/bench/kernels_bench" --benchmark_filter=Device --benchmark_min_time=0.3
  bench pinned 120 "$build/bench/state_dict_ops_bench" --benchmark_filter=Pinned \
    --benchmark_min_time=0.2
fi

# -- the logs (one file) and the table, printed last.
current=
verdict_word=$([ "$failed" = 0 ] && echo passed || echo FAILED)
publish "$verdict_word"
for f in "$logs"/bench-*.summary "$logs"/*.skips.txt; do
  [ -s "$f" ] && { echo "== $(basename "$f")"; cat "$f"; }
done
table
coverage | tee -a "$out/table.txt"
echo "device-check: $verdict_word, $SECONDS s of a ${budget} s budget; files in $out"
exit "$failed"
