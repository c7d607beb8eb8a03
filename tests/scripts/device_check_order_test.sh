#!/usr/bin/env bash
# scripts/device-check.sh --list: the GPU check runs what has never run on a GPU first (the
# GPU tests, then the NCCL smoke test, the NCCL tests and both CUDA loads) and the
# sanitizers and benchmarks after; racecheck only on the kernel that shares memory; an
# unknown flag is exit 2. (The steps' own logic runs on the lent GPU; the dry run builds it.)
set -euo pipefail
script="$1/scripts/device-check.sh"
read -r -a steps <<<"$("$script" --list)"
at() {
  local i
  for i in "${!steps[@]}"; do [ "${steps[$i]}" = "$1" ] && { echo "$i"; return; }; done
  echo "device_check_order_test: no step $1 in: ${steps[*]}" >&2
  exit 1
}
before() {
  [ "$(at "$1")" -lt "$(at "$2")" ] || { echo "$1 must run before $2: ${steps[*]}" >&2; exit 1; }
}
[ "${steps[*]:0:5}" = "env bundle configure build ctest-gpu" ] ||
  { echo "the check must start with env bundle configure build ctest-gpu: ${steps[*]}" >&2; exit 1; }
before ctest-gpu nccl-smoke
before nccl-smoke ctest-nccl
before ctest-nccl load
before load load-gpt2
for later in memcheck-kernels memcheck-runtime initcheck-kernels initcheck-runtime racecheck-fp8 \
             load-h2d bench-kernels bench-pinned; do
  before load-gpt2 "$later"
done
before initcheck-runtime bench-kernels
before load-h2d bench-kernels
racechecks=$(printf '%s\n' "${steps[@]}" | grep -c '^racecheck' || true)
[ "$racechecks" = 1 ] || { echo "one racecheck step expected, got $racechecks" >&2; exit 1; }
if "$script" --bogus >/dev/null 2>&1; then
  echo "an unknown flag must fail" >&2
  exit 1
else
  [ $? = 2 ] || { echo "an unknown flag must be exit 2" >&2; exit 1; }
fi
echo "device-check order: ${steps[*]}"
