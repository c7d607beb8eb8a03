#!/usr/bin/env bash
# Instructions per tensor of GatherStateDict, BroadcastStateDict and DistributeStateDict, of
# ExecuteReshard in the planned rows and of BoundReshard::Execute in the bound rows, the
# stable measure of per-tensor cost
# (docs/PERFORMANCE.md): `sdrt bench` on a workload of
# 10,000 tensors (default `tiny`, next to no bytes) under callgrind on every rank, counting
# only inside the operation (--toggle-collect) and leaving out the time a rank spends
# waiting in MPI for the others (the inclusive cost of MpiCommunicator::Await), per call.
# Prints one line per op and rank. Needs valgrind. Takes a minute or two.
#
# usage: bench/per_tensor_instructions.sh [BUILD_DIR] [RANKS] [WORKLOAD]
#        (defaults: build-release, 2, tiny)
set -euo pipefail
build=${1:-build-release}
ranks=${2:-2}
workload=${3:-tiny}
sdrt=$build/bin/sdrt
[ -x "$sdrt" ] || { echo "no $sdrt: build the sdrt_cli target first" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }
case $workload in
  tiny | small) tensors=10000 ;;
  llama) tensors=291 ;;
  *) echo "workload: tiny, small or llama" >&2; exit 2 ;;
esac
out=$(mktemp -d "${TMPDIR:-/tmp}/sdrt-instr.XXXXXX")
trap 'rm -rf "$out"' EXIT
declare -A fn=([gather]='sdrt::GatherStateDict*' [broadcast]='sdrt::BroadcastStateDict*'
               [distribute]='sdrt::DistributeStateDict*' [gather_planned]='sdrt::ExecuteReshard*'
               [broadcast_planned]='sdrt::ExecuteReshard*'
               [distribute_planned]='sdrt::ExecuteReshard*'
               [gather_bound]='sdrt::BoundReshard::Execute*'
               [broadcast_bound]='sdrt::BoundReshard::Execute*'
               [distribute_bound]='sdrt::BoundReshard::Execute*')
for op in gather broadcast distribute gather_planned broadcast_planned distribute_planned \
          gather_bound broadcast_bound distribute_bound; do
  # One warm-up call and one timed call: two calls counted.
  mpiexec -n "$ranks" valgrind --tool=callgrind --callgrind-out-file="$out/$op.%q{PMI_RANK}" \
    --toggle-collect="${fn[$op]}" "$sdrt" bench --workload "$workload" --ops "$op" \
    --iters 1 --warmup 1 >/dev/null 2>&1
  for ((r = 0; r < ranks; ++r)); do
    f=$out/$op.$r
    total=$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
    wait=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null |
           awk '/MpiCommunicator::Await/ && !found {gsub(",","",$1); print $1; found = 1}')
    printf '%-18s rank %d: %6d instructions per tensor per call (%d with MPI waits)\n' "$op" "$r" \
      $(( (total - ${wait:-0}) / tensors / 2 )) $(( total / tensors / 2 ))
  done
done
