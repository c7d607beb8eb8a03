#!/usr/bin/env bash
# Holds `sdrt simulate`'s cost model against the measured weight sync on this machine: for
# 2, 4 and 8 MPI ranks, `sdrt bench --ops links,sync_layout` measures the links (latency,
# the bandwidth between two ranks, the copy bandwidth: the `--cluster` text of its links row)
# and times the bound sync between two parallel layouts; `sdrt simulate` then predicts that
# sync from the same model file, layouts, bucket and measured links. One table row per case:
# ranks, model, from, to, the measured sync (sync_layout's median), the flat baseline (one
# exchange of the same bytes per rank), the prediction and predicted / measured.
#
# The models are made once in WORK_DIR by `sdrt make`: llama-8b at scale 0.17 (48 tensors,
# 125 MB) and qwen3-moe at scale 0.125 (687 tensors, 179 MB, 16 experts per layer, which ep
# 2, 4 and 8 divide). The layout pairs: fsdp -> vllm tp over all ranks, and a Megatron
# trainer -> a vLLM engine (2 ranks: megatron:pp=2 -> vllm:tp=2; 4: megatron:tp=2,pp=2,ep=2
# -> vllm:tp=2,dp=2,ep=4; 8: megatron:tp=2,pp=2,ep=4 -> vllm:tp=2,dp=4,ep=8).
#
# Run by hand, not in CI (about a minute on a 2-core machine; bench/RESULTS.md has the median of
# three runs with ITERS=9):
#   bench/calibrate_sync.sh build /tmp/calib
# BUCKET_MIB (default 16, several exchanges per sync) and ITERS (default 5) override.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR WORK_DIR" >&2
  exit 2
fi
sdrt="$1/bin/sdrt"
work="$2"
bucket_mib="${BUCKET_MIB:-16}"
iters="${ITERS:-5}"
if [[ ! -x "$sdrt" ]]; then
  echo "$0: no sdrt at $sdrt (build the sdrt_cli target)" >&2
  exit 2
fi
mkdir -p "$work"

llama="$work/llama-8b.safetensors"
moe="$work/qwen3-moe.safetensors"
[[ -f "$llama" ]] || "$sdrt" make --arch llama-8b --scale 0.17 "$llama" >/dev/null
[[ -f "$moe" ]] || "$sdrt" make --arch qwen3-moe --scale 0.125 "$moe" >/dev/null

# The trainer -> engine pair of each world size.
trainer_engine() {
  case "$1" in
    2) echo "megatron:pp=2 vllm:tp=2" ;;
    4) echo "megatron:tp=2,pp=2,ep=2 vllm:tp=2,dp=2,ep=4" ;;
    8) echo "megatron:tp=2,pp=2,ep=4 vllm:tp=2,dp=4,ep=8" ;;
  esac
}

# A value of a JSON object on stdin: the row of op $2 of a bench list, or the object itself
# when $2 is empty; key $1.
json_value() {
  python3 -c '
import json, sys
key, op = sys.argv[1], sys.argv[2]
data = json.load(sys.stdin)
if op:
    data = next(row for row in data if row["op"] == op)
print(data[key])' "$1" "$2"
}

row() { printf '%5s  %-9s  %-34s  %-34s  %11s  %11s  %12s  %9s\n' "$@"; }
row ranks model from to "measured ms" "flat ms" "predicted ms" "pred/meas"
clusters=()
for n in 2 4 8; do
  read -r trainer engine <<<"$(trainer_engine "$n")"
  for model in "$llama" "$moe"; do
    for pair in "fsdp: vllm:tp=$n" "$trainer $engine"; do
      read -r from to <<<"$pair"
      bench=$(mpiexec -n "$n" "$sdrt" bench --workload "$model" --ops links,sync_layout \
        --from "$from" --to "$to" --bucket-mib "$bucket_mib" --iters "$iters" --json)
      cluster=$(json_value cluster links <<<"$bench")
      measured=$(json_value time_ms sync_layout <<<"$bench")
      flat=$(json_value flat_ms sync_layout <<<"$bench")
      from_full=$(json_value from sync_layout <<<"$bench")
      to_full=$(json_value to sync_layout <<<"$bench")
      simulated=$("$sdrt" simulate --model "$model" --from "$from" --to "$to" \
        --cluster "$cluster" --bucket-mib "$bucket_mib" --json)
      predicted=$(json_value predicted_seconds "" <<<"$simulated")
      read -r measured flat predicted ratio <<<"$(python3 -c '
import sys
m, f, p = (float(x) for x in sys.argv[1:])
print(f"{m:.2f} {f:.2f} {p * 1e3:.2f} {p * 1e3 / m:.3f}")' "$measured" "$flat" "$predicted")"
      row "$n" "$(basename "$model" .safetensors)" "$from_full" "$to_full" \
        "$measured" "$flat" "$predicted" "$ratio"
      clusters+=("$n ranks, $(basename "$model" .safetensors), $from -> $to: $cluster")
    done
  done
done
echo "# bucket $bucket_mib MiB, $iters timed runs; the links each run measured (--cluster):"
for line in "${clusters[@]}"; do echo "#   $line"; done
