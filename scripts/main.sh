#!/usr/bin/env bash
# The main job: install what is missing, build, and run `sdrt demo` (shard -> gather ->
# load of a built-in deterministic checkpoint under mpiexec, one summary table).
# Arguments go to `sdrt demo` (for example --json, --ranks 2, --checkpoint FILE).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SDRT_BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
exec "$build/bin/sdrt" demo "$@"
