#!/usr/bin/env bash
# tensor_count_rows.sh: nothing quadratic in the tensor count. Every sdrt command that walks a
# checkpoint's tensors (inspect, shard, gather, load, reshard; of a safetensors file, a Hugging
# Face folder of several files and a sharded folder) is timed at 10,000 and at 100,000 tensors
# (load_bench's workloads "small" and "small100k": the same tensor sizes, 10x the count and
# the bytes), whole commands as a user runs them, the median of three runs, 2 ranks. Per row:
# both times and t(100k) / (10 x t(10k)); a command whose cost grows linearly gives about 1
# (less where a fixed start-up cost is spread), and the row fails above 2.
#
#   bench/tensor_count_rows.sh BUILD_DIR WORK_DIR
#
# BUILD_DIR holds bin/sdrt and bench/load_bench; WORK_DIR (created, about 1 GB written) keeps
# the inputs between runs. Needs mpiexec. Exit 1 when a row fails or a command does.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 BUILD_DIR WORK_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)
work=$2
sdrt="$build/bin/sdrt"
mkdir -p "$work"
work=$(cd "$work" && pwd)

# The inputs of one count: FILE, a sharded folder SH (fsdp over 2), a Hugging Face folder HF
# of about 4 files gathered from SH.
make_inputs() {
  local name=$1 dir="$work/$1"
  [[ -f "$dir/done" ]] && return 0
  rm -rf "$dir" && mkdir -p "$dir"
  "$build/bench/load_bench" --make "$name" "$dir/file.safetensors" >/dev/null
  "$sdrt" shard "$dir/file.safetensors" "$dir/sh" --mesh 2 --plan fsdp >/dev/null
  local bytes
  bytes=$(stat -c %s "$dir/file.safetensors")
  mpiexec -n 2 "$sdrt" gather "$dir/sh" "$dir/hf/" --max-shard-size $((bytes / 4 + 1)) >/dev/null
  touch "$dir/done"
}

# Median wall seconds of three runs of "$@" (output discarded; a failure stops the script).
median3() {
  local times=() t0 t1
  for _ in 1 2 3; do
    rm -rf "$work/out"
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>"$work/stderr" || { cat "$work/stderr" >&2; echo "failed: $*" >&2; exit 1; }
    t1=$(date +%s.%N)
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')")
  done
  printf '%s\n' "${times[@]}" | sort -g | sed -n 2p
}

make_inputs small
make_inputs small100k

rows=(
  "inspect file|$sdrt inspect @/file.safetensors"
  "inspect HF folder|$sdrt inspect @/hf"
  "inspect sharded|$sdrt inspect @/sh"
  "shard file|$sdrt shard @/file.safetensors $work/out --mesh 2 --plan tp"
  "shard HF folder|$sdrt shard @/hf $work/out --mesh 2 --plan tp"
  "gather to file|mpiexec -n 2 $sdrt gather @/sh $work/out.safetensors --overwrite"
  "gather to HF folder|mpiexec -n 2 $sdrt gather @/sh $work/out/ --max-shard-size 64MB"
  "load file|mpiexec -n 2 $sdrt load @/file.safetensors --mesh 2 --plan fsdp --read all"
  "load HF folder|mpiexec -n 2 $sdrt load @/hf --mesh 2 --plan tp --read all"
  "load sharded|mpiexec -n 2 $sdrt load @/sh --mesh 2 --plan tp"
  "reshard sharded|mpiexec -n 2 $sdrt reshard @/sh $work/out --mesh 2 --plan tp"
)
printf '%-22s %9s %9s %7s  %s\n' path "10k s" "100k s" ratio verdict
failed=0
for row in "${rows[@]}"; do
  label=${row%%|*}
  command=${row#*|}
  # shellcheck disable=SC2086  # the command is split into words on purpose
  small=$(median3 ${command//@/$work/small})
  # shellcheck disable=SC2086
  large=$(median3 ${command//@/$work/small100k})
  ratio=$(awk -v s="$small" -v l="$large" 'BEGIN { printf "%.2f", l / (10 * s) }')
  verdict=ok
  if awk -v r="$ratio" 'BEGIN { exit !(r > 2) }'; then verdict=FAIL; failed=1; fi
  printf '%-22s %9.3f %9.3f %7.2f  %s\n' "$label" "$small" "$large" "$ratio" "$verdict"
done
rm -rf "$work/out" "$work/out.safetensors" "$work/stderr"
exit "$failed"
